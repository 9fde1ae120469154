package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// The guest has a home directory and a umask, with nothing of the host's
// in its environment.
func TestGuestHomeAndUmask(t *testing.T) {
	for _, c := range []struct{ code, want string }{
		{`ENV.to_h.inspect`, `{}`},
		{`File.expand_path("~")`, "/tmp"},
		{`File.expand_path("~/a/b")`, "/tmp/a/b"},
		{`File.expand_path("x", "~")`, "/tmp/x"},
		{`Dir.home`, "/tmp"},
		{`File.writable?(Dir.home).to_s`, "true"},
		{`ENV["HOME"] = "/tmp/h"; [File.expand_path("~"), Dir.home].join(" ")`, "/tmp/h /tmp/h"},
		{`File.expand_path("~nosuchuser") rescue $!.class.name`, "ArgumentError"},
		{`File.umask.to_s(8)`, "22"},
		{`[File.umask(0o077), File.umask, File.umask(0o1777), File.umask].map { _1.to_s(8) }.join(" ")`, "22 77 77 777"},
		{`(File.umask(2**64) rescue $!.class.name)`, "RangeError"},
		{`(File.umask(1, 2) rescue $!.class.name)`, "ArgumentError"},
		{`(File.umask("1") rescue $!.class.name)`, "TypeError"},
	} {
		out := evalOut(t, c.code, 10*time.Second)
		if out.Status != StatusOK || fmt.Sprint(out.Value) != c.want {
			t.Errorf("%s: %s %v %+v, want %q", c.code, out.Status, out.Value, out.Error, c.want)
		}
	}
}

// io/nonblock (not in the image) works on fcntl's O_NONBLOCK.
func TestGuestIONonblock(t *testing.T) {
	lim := testLimits
	lim.FS = FSLimits{Write: 1 << 20, Creates: 10}
	out, err := testEngine.Eval(context.Background(), &Request{Limits: lim, Code: `require "io/nonblock"
		File.open("/tmp/x", "w") { |f| a = f.nonblock?; f.nonblock = true; [a, f.nonblock?, f.nonblock(false) { f.nonblock? }, f.nonblock?] }.inspect`})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusOK || out.Value != "[false, true, false, true]" {
		t.Fatalf("%s %v %+v", out.Status, out.Value, out.Error)
	}
}

// extensionEntry is the feature to require for an extension whose .so
// is loaded by a library rather than on its own.
var extensionEntry = map[string]string{
	"prism/prism":        "prism",
	"json/ext/generator": "json",
	"json/ext/parser":    "json",
	"date_core":          "date",
	"cgi/escape":         "cgi/escape",
	"rbconfig/sizeof":    "rbconfig/sizeof",
	"js":                 "", // the host channel: the prelude removes it
	"encdb":              "", // loaded at boot, no feature of its own
	"trans/transdb":      "",
}

// Every extension compiled into the image can be required.
func TestImageExtensionsRequire(t *testing.T) {
	img, err := os.ReadFile(testImage)
	if err != nil {
		t.Fatal(err)
	}
	// The image names its built-in extensions as NUL-terminated "x.so"
	// strings (the table ruby_init_ext registers them from).
	seen := map[string]bool{}
	name := regexp.MustCompile(`^([a-z][a-z0-9_/]*)\.so$`)
	for _, s := range bytes.Split(img, []byte{0}) {
		m := name.FindSubmatch(s)
		if m == nil {
			continue
		}
		n := string(m[1])
		if strings.HasPrefix(n, "enc/") {
			continue // encodings: loaded on use, tried by the encoding specs
		}
		if e, ok := extensionEntry[n]; ok {
			n = e
		}
		if n != "" {
			seen[n] = true
		}
	}
	if len(seen) < 20 {
		t.Fatalf("only %d extensions found in the image: %v", len(seen), seen)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	code := fmt.Sprintf(`%q.split(",").to_h { |f| [f, (begin; require f; "ok"; rescue ScriptError, StandardError => e; "#{e.class}: #{e.message}"; end)] }.reject { |_, v| v == "ok" }.inspect`, strings.Join(names, ","))
	out := evalOut(t, code, 60*time.Second)
	if out.Status != StatusOK || out.Value != "{}" {
		t.Fatalf("extensions that do not load: %s %v %+v", out.Status, out.Value, out.Error)
	}
	t.Logf("%d extensions load: %v", len(names), names)
}

// The prelude's wrappers keep the signatures of what they wrap.
func TestPreludeWrappersKeepSignatures(t *testing.T) {
	lim := testLimits
	lim.FS = FSLimits{Write: 1 << 20, Creates: 10}
	for _, c := range []struct{ code, want string }{
		{`f = File.open("/tmp/x", "w"); io = IO.new(f.fileno, mode: "w", autoclose: false); [io.autoclose?, io.fileno == f.fileno].inspect`, "[false, true]"},
		{`f = File.open("/tmp/y", "w"); IO.new(f.fileno, "w", path: "/tmp/y", autoclose: false).path`, "/tmp/y"},
		{`IO.open(File.open("/tmp/z", "w").fileno, "w", binmode: true) { |io| io.binmode?.to_s }`, "true"},
		{`(ENV.method(:store) == ENV.method(:[]=)).to_s`, "true"},
	} {
		out, err := testEngine.Eval(context.Background(), &Request{Limits: lim, Code: c.code})
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != StatusOK || fmt.Sprint(out.Value) != c.want {
			t.Errorf("%s: %s %v %+v, want %q", c.code, out.Status, out.Value, out.Error, c.want)
		}
	}
}

// With no input, STDIN is the process's own standard input (an IO at end
// of file), as in CRuby; with input, it reads the input.
func TestGuestStdinIsIO(t *testing.T) {
	out := evalOut(t, `[STDIN.class, STDIN.read, $stdin.equal?(STDIN), File.directory?(STDIN), STDIN.sync, STDIN.gets].inspect`, 10*time.Second)
	if out.Status != StatusOK || out.Value != `[IO, "", true, false, false, nil]` {
		t.Fatalf("%s %v %+v", out.Status, out.Value, out.Error)
	}
	lim := testLimits
	out, err := testEngine.Eval(context.Background(), &Request{Limits: lim, Stdin: []byte("a\nb\n"), Code: `[STDIN.gets, $stdin.read].inspect`})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusOK || out.Value != `["a\n", "b\n"]` {
		t.Fatalf("with input: %s %v %+v", out.Status, out.Value, out.Error)
	}
	out = evalOut(t, `STDIN.read.inspect`, 10*time.Second) // the next VM: no input again
	if out.Status != StatusOK || out.Value != `""` {
		t.Fatalf("after input: %s %v %+v", out.Status, out.Value, out.Error)
	}
}
