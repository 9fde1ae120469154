package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox/internal/npmtest"
)

// The official conformance suite, client mode, against `glovebox eval
// --mcp-url` (testdata/conformance/client.rb picks the program each
// scenario needs), with the scenarios each revision requires, the OAuth
// ones included (a subtest per revision; `make mcp-conformance` runs it).
// The suite fails on a failure not listed in
// testdata/conformance/expected-failures-client-REVISION.yaml. Then no
// access token the suite's authorization servers issued may appear in
// anything glovebox printed: they stay in the host's memory.
func TestMCPConformanceClient(t *testing.T) {
	node := npmtest.Node(t)
	dir := npmtest.Dir(t, "@modelcontextprotocol/conformance")
	suite := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	for _, need := range []string{"ruby", "curl"} {
		if _, err := exec.LookPath(need); err != nil {
			t.Skipf("the conformance client needs %s (the wrapper is Ruby; curl plays the browser in the OAuth flows)", need)
		}
	}
	td, err := filepath.Abs("testdata/conformance")
	if err != nil {
		t.Fatal(err)
	}
	for _, rev := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(rev, func(t *testing.T) {
			outDir := t.TempDir()
			cmd := exec.Command(node, suite, "client", "--command", "ruby "+filepath.Join(td, "client.rb"),
				// A generous bound per scenario (the suite's default is 30 s): on
				// a loaded machine a scenario's eval waited past it.
				"--timeout", "180000",
				"--requirements", rev, "--expected-failures", filepath.Join(td, "expected-failures-client-"+rev+".yaml"), "-o", outDir)
			cmd.Env = append(os.Environ(), "GLOVEBOX="+bin)
			out, err := cmd.CombinedOutput()
			summary := string(out)
			if i := strings.Index(summary, "=== SUITE SUMMARY ==="); i >= 0 {
				summary = summary[i:]
			}
			if err != nil {
				t.Fatalf("client conformance at %s: %v\n%s", rev, err, summary)
			}
			t.Logf("client conformance at %s:\n%s", rev, summary)
			checkNoTokens(t, outDir)
		})
	}
}

// suiteToken matches the access tokens the suite's authorization servers
// issue (test-token-<ms>, cc-token-...).
var suiteToken = regexp.MustCompile(`\b(test|cc)-token-[0-9A-Za-z]+`)

// checkNoTokens fails t if glovebox's output in any scenario (the
// suite's stdout.txt and stderr.txt per scenario) holds an access token.
// As a control, the suite's own record of the tokens it saw
// (checks.json, the first 15 characters of each) must match the pattern.
func checkNoTokens(t *testing.T, outDir string) {
	t.Helper()
	seen := 0
	err := filepath.WalkDir(outDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if d.Name() == "checks.json" {
			seen += len(suiteToken.FindAll(b, -1))
			return nil
		}
		if d.Name() != "stdout.txt" && d.Name() != "stderr.txt" {
			return nil
		}
		if m := suiteToken.Find(b); m != nil {
			t.Errorf("%s holds an access token (%s):\n%s", p, m, bytes.TrimSpace(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatalf("the suite recorded no token under %s: the pattern %v no longer matches its tokens, or no OAuth scenario ran", outDir, suiteToken)
	}
}

// glovebox eval binds a server at the revision asked for, over stdio and
// HTTP: glovebox's own MCP server, which serves 2026-07-28 (found by
// server/discover) and 2025-11-25 (initialize). --log-mcp says which one
// each connection speaks.
func TestEvalBindsEachRevision(t *testing.T) {
	url := startMCPHTTP(t)
	for _, transport := range []string{"--mcp-server=g=" + bin + " mcp", "--mcp-url=g=" + url} {
		for _, rev := range []string{"2026-07-28", "2025-11-25"} {
			args := []string{"eval", "--stdin", "/dev/null", "--log-mcp", transport, "-e", `run_ruby(code: "6*7")["structured"]["value"]`}
			if rev != "2026-07-28" {
				args = append(args, "--mcp-protocol", rev)
			}
			out, errOut, code := run(t, "", args...)
			if code != 0 || strings.TrimSpace(out) != "=> 42" || !strings.Contains(errOut, "protocol="+rev) {
				t.Errorf("%s at %s: exit %d\n%s\n%s", transport, rev, code, out, errOut)
			}
		}
	}
}

// The OAuth and revision flags refuse what they cannot use, before
// anything starts.
func TestEvalMCPAuthFlagErrors(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--mcp-oauth x", `no --mcp-url server is named "x"`},
		{"--mcp-server=s=true --mcp-oauth s", `no --mcp-url server is named "s"`},
		{"--mcp-url s=http://127.0.0.1:1/mcp --mcp-oauth s,colour=red", `unknown key "colour"`},
		{"--mcp-url s=http://127.0.0.1:1/mcp --mcp-oauth s,client_secret_env=GLOVEBOX_NO_SUCH_VAR", `$GLOVEBOX_NO_SUCH_VAR is not set`},
		{"--mcp-url s=http://127.0.0.1:1/mcp --mcp-protocol t=2025-11-25", `no server is named "t"`},
		{"--mcp-url s=http://127.0.0.1:1/mcp --mcp-elicit maybe", `want refuse, decline, accept or client`},
		{"--mcp-url s=http://127.0.0.1:1/mcp --mcp-max-message 10", `at least 1KiB`},
		{"--mcp-url s=http://127.0.0.1:1/mcp --mcp-max-message lots", `is not a size`},
	} {
		_, errOut, code := run(t, "", append(append([]string{"eval", "--stdin", "/dev/null"}, strings.Fields(tc.args)...), "-e", "1")...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %s", tc.args, code, errOut)
		}
	}
}

// A profile's server takes protocol and oauth; their mistakes are usage
// errors naming the profile's key.
func TestProfileMCPOAuth(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(p, []byte("mcp_servers:\n  docs:\n    url: http://127.0.0.1:1/mcp\n    protocol: 2025-11-25\n    oauth: {client_id: app, client_secret_env: GLOVEBOX_NO_SUCH_VAR}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "", "eval", "--stdin", "/dev/null", "--profile", p, "-e", "1")
	if code != exitUsage || !strings.Contains(errOut, "mcp_servers.docs.oauth: $GLOVEBOX_NO_SUCH_VAR is not set") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// --mcp-max-message caps what glovebox reads of one message from a bound
// server: a result past it fails the call with an error naming the
// server and the cap, and the URL's secrets stay out of the output.
func TestEvalMCPMaxMessage(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "big", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 64<<10)}}}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer srv.Close()
	code := `begin; big["text"].size; rescue Glovebox::MCPProtocolError => e; e.message; end`
	out, errOut, exit := run(t, "", "eval", "--stdin", "/dev/null", "--mcp-url", "b="+srv.URL+"/mcp?key=SECRETKEY", "-e", code)
	if exit != 0 || strings.TrimSpace(out) != "=> 65536" {
		t.Fatalf("under the default cap: exit %d\n%s\n%s", exit, out, errOut)
	}
	out, errOut, exit = run(t, "", "eval", "--stdin", "/dev/null", "--mcp-url", "b="+srv.URL+"/mcp?key=SECRETKEY", "--mcp-max-message", "16KiB", "-e", code)
	if exit != 0 || !strings.Contains(out, `server \"b\" sent`) || !strings.Contains(out, `of more than 16384 bytes, the cap`) || !strings.Contains(out, "--mcp-max-message") || strings.Contains(out+errOut, "SECRETKEY") {
		t.Fatalf("over --mcp-max-message: exit %d\n%s\n%s", exit, out, errOut)
	}
}
