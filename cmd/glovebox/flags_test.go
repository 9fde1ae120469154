package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestFlagMessages: every size, duration and count flag and profile key
// names itself, the value and the accepted forms or the maximum, and
// exits 2.
func TestFlagMessages(t *testing.T) {
	dir := t.TempDir()
	n := 0
	prof := func(body string) string {
		n++
		p := filepath.Join(dir, itoa(n)+".yaml")
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--memory", "lots"}, []string{"--memory", `"lots"`, "512MiB", "at most 4GiB"}},
		{[]string{"--memory", "2TiB"}, []string{"--memory", `"2TiB"`, "maximum of 4GiB"}},
		{[]string{"--memory", "-1GiB"}, []string{"--memory", `"-1GiB"`, "not a size"}},
		{[]string{"--stdout-limit", "2GiB"}, []string{"--stdout-limit", "maximum of 1GiB"}},
		{[]string{"--stderr-limit", "x"}, []string{"--stderr-limit", `"x"`, "64KiB"}},
		{[]string{"--stdin-limit", "x"}, []string{"--stdin-limit", `"x"`}},
		{[]string{"--timeout", "soon"}, []string{"--timeout", `"soon"`, "500ms"}},
		{[]string{"--timeout", "-1s"}, []string{"--timeout", "negative"}},
		{[]string{"--timeout", "100h"}, []string{"--timeout", "maximum of 24h"}},
		{[]string{"--fuel", "lots"}, []string{"--fuel", `"lots"`, "5e8"}},
		{[]string{"--fuel", "99999999999999999999"}, []string{"--fuel", "maximum"}},
		{[]string{"--http-allow", "localhost", "--http-port", "http"}, []string{"--http-port", `"http"`, "65535"}},
		{[]string{"--http-allow", "localhost", "--http-trust", "10.0.0.1"}, []string{"--http-trust", `"10.0.0.1"`, "CIDR"}},
		{[]string{"--http-port", "8080"}, []string{"--http-port", "need --http-allow"}},
		{[]string{"--profile", prof("limits:\n  memory: lots\n")}, []string{"limits.memory", `"lots"`, "512MiB"}},
		{[]string{"--profile", prof("limits:\n  tool_time: forever\n")}, []string{"limits.tool_time", `"forever"`, "10s"}},
		{[]string{"--profile", prof("limits:\n  fuel: lots\n")}, []string{"limits.fuel", `"lots"`}},
		{[]string{"--profile", prof("limits:\n  tool_calls: many\n")}, []string{"limits.tool_calls", `"many"`}},
		{[]string{"--profile", prof("limits:\n  file_write: 2TiB\n")}, []string{"limits.file_write", "maximum of 1TiB"}},
		{[]string{"--profile", prof("http:\n  allow: [a.com]\n  ports: [web]\n")}, []string{"http.ports", `"web"`}},
	}
	for _, c := range cases {
		_, errOut, code := run(t, "", append(append([]string{"eval"}, c.args...), "-e", "1")...)
		if code != 2 || strings.Contains(errOut, "strconv") || strings.Contains(errOut, "ParseFloat") {
			t.Errorf("%v: code %d stderr %q", c.args, code, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q lacks %q", c.args, errOut, w)
			}
		}
	}
	// Numbers written as YAML numbers work, and forms such as 5e8.
	p := prof("limits:\n  fuel: 5e8\n  memory: 536870912\n  tool_calls: 5\n  stdin: 1024\n")
	if out, errOut, code := run(t, "", "eval", "--profile", p, "--fuel", "1_000_000_000", "-e", "1"); code != 0 || out != "=> 1\n" {
		t.Fatalf("numbers: code %d out %q err %q", code, out, errOut)
	}
}

// TestMountErrorsBeforeWork: a missing or non-directory mount, from a
// flag or the profile, is a usage error (exit 2) reported before any
// snapshot is built.
func TestMountErrorsBeforeWork(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	os.WriteFile(file, nil, 0o644)
	prof := filepath.Join(dir, "p.yaml")
	os.WriteFile(prof, []byte("mounts:\n  - host: nowhere\n    guest: /data\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mount", "/nonexistent-gb-dir:/data"}, "no such file or directory"},
		{[]string{"--mount", file + ":/data"}, "not a directory"},
		{[]string{"--profile", prof}, "mounts[0].host"},
	} {
		_, errOut, code := run(t, "", append(append([]string{"eval"}, c.args...), "-e", "1")...)
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "snapshot") {
			t.Errorf("%v: code %d stderr %q", c.args, code, errOut)
		}
	}
}

// TestProfileKeysDocumented: the keys the profile parser accepts are
// exactly those docs/cli.md's table and eval --help list.
func TestProfileKeysDocumented(t *testing.T) {
	var accepted []string
	var walk func(prefix string, ty reflect.Type)
	walk = func(prefix string, ty reflect.Type) {
		for i := range ty.NumField() {
			f := ty.Field(i)
			key := prefix + strings.Split(f.Tag.Get("yaml"), ",")[0]
			switch {
			case f.Type.Name() == "Node": // a yaml.Node section is read by its own parser
				accepted = append(accepted, key)
			case f.Type.Kind() == reflect.Struct:
				walk(key+".", f.Type)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				walk(key+"[].", f.Type.Elem())
			default:
				accepted = append(accepted, key)
			}
		}
	}
	walk("", reflect.TypeFor[profileFile]())
	var documented []string
	for _, k := range profileKeys {
		documented = append(documented, k.key)
	}
	if !reflect.DeepEqual(accepted, documented) {
		t.Fatalf("the parser accepts %v\nprofileKeys documents %v", accepted, documented)
	}
	readme, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var inReadme []string
	for _, line := range strings.Split(string(readme), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			if key, _, ok := strings.Cut(rest, "`"); ok && (strings.HasPrefix(key, "limits.") || strings.HasPrefix(key, "http.") || strings.HasPrefix(key, "mounts[].") || key == "mcp_servers" || strings.HasPrefix(key, "box.")) {
				inReadme = append(inReadme, key)
			}
		}
	}
	if !reflect.DeepEqual(inReadme, documented) {
		t.Fatalf("docs/cli.md's profile table lists %v\nthe parser accepts %v", inReadme, documented)
	}
	out, _, _ := run(t, "", "eval", "--help")
	for _, k := range documented {
		if !strings.Contains(out, "  "+k+" ") {
			t.Errorf("eval --help lacks %s", k)
		}
	}
}

// TestHTTPDevServer: the HTTP flags reach a development server on
// loopback, and each refusal names the flag that would lift it.
func TestHTTPDevServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("dev")) })}
	go srv.Serve(ln)
	defer srv.Close()
	port := itoa(ln.Addr().(*net.TCPAddr).Port)
	url := "http://127.0.0.1:" + port + "/"
	get := `r = http_get("` + url + `"); r["body"]`
	full := []string{"--http-allow", "127.0.0.1", "--http-allow-ip-literals", "--http-port", port, "--http-trust", "127.0.0.1/32"}
	if out, errOut, code := run(t, "", append(append([]string{"eval"}, full...), "-e", get)...); code != 0 || out != "=> \"dev\"\n" {
		t.Fatalf("dev server: code %d out %q err %q", code, out, errOut)
	}
	dir := t.TempDir()
	prof := filepath.Join(dir, "p.yaml")
	os.WriteFile(prof, []byte("http:\n  allow: [127.0.0.1]\n  allow_ip_literals: true\n  ports: ["+port+"]\n  trust: [127.0.0.1/32]\n"), 0o644)
	if out, errOut, code := run(t, "", "eval", "--profile", prof, "-e", get); code != 0 || out != "=> \"dev\"\n" {
		t.Fatalf("dev server from the profile: code %d out %q err %q", code, out, errOut)
	}
	for _, c := range []struct {
		drop int // index in full of the flag left out
		want string
	}{
		{2, "--http-allow-ip-literals"}, {3, "--http-port"}, {5, "--http-trust"},
	} {
		args := []string{"eval"}
		for i := 0; i < len(full); i++ {
			if i == c.drop {
				if full[i] != "--http-allow-ip-literals" {
					i++
				}
				continue
			}
			args = append(args, full[i])
		}
		_, errOut, code := run(t, "", append(args, "-e", get)...)
		if code == 0 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "httptool.Config.") || !strings.Contains(errOut, "profile key http.") {
			t.Errorf("without %s: code %d stderr %q", c.want, code, errOut)
		}
	}
}

// TestReplBanner: the banner states every limit that applies per input.
func TestReplBanner(t *testing.T) {
	out, _, _ := run(t, "", "repl", "--fuel", "5e8", "--timeout", "3s")
	if !strings.Contains(out, "3s timeout, 512 MiB memory, 500000000 fuel") {
		t.Fatalf("banner: %q", out)
	}
	out, _, _ = run(t, "", "repl")
	if !strings.Contains(out, "no fuel budget") {
		t.Fatalf("banner: %q", out)
	}
}
