package mcptools_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/npmtest"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// conformanceScenarios are the client scenarios of
// @modelcontextprotocol/conformance that apply to a binding. The rest do
// are run, with the auth/* ones and at each revision, against the CLI
// (cmd/glovebox TestMCPConformanceClient, where a Server.OAuth is set up
// from --mcp-oauth).
var conformanceScenarios = []string{"initialize", "tools_call", "sse-retry", "elicitation-sep1034-client-defaults"}

// conformanceClient is the client the suite starts: it binds the server
// at the URL the suite appends, and calls the scenario's tool from guest
// code (add_numbers for tools_call, test_reconnection for sse-retry,
// test_client_elicitation_defaults with a Config.Elicit that accepts each
// field's default for the SEP-1034 scenario).
func conformanceClient() int {
	url := os.Args[len(os.Args)-1]
	ctx := context.Background()
	var ts glovebox.Toolset
	b, err := mcptools.Bind(ctx, &ts, mcptools.Config{Elicit: mcptools.AcceptDefaults}, mcptools.Server{Name: "conf", URL: url})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	defer b.Close()
	if os.Getenv("MCP_CONFORMANCE_SCENARIO") == "initialize" {
		// The server offers no tools: binding it (none) is the scenario.
		if len(ts.Names()) != 0 {
			return 1
		}
		return 0
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		return 1
	}
	defer rt.Close()
	code := `add_numbers(a: 2, b: 3)["text"]`
	if os.Getenv("MCP_CONFORMANCE_SCENARIO") == "sse-retry" {
		// The server closes the call's stream after its first event and
		// answers on the standalone stream once the client reconnects.
		code = `test_reconnection["text"]`
	}
	if os.Getenv("MCP_CONFORMANCE_SCENARIO") == "elicitation-sep1034-client-defaults" {
		code = `r = test_client_elicitation_defaults["text"]; raise r unless r.start_with?("Elicitation completed"); r`
	}
	res, err := rt.Eval(ctx, code)
	if err != nil || res.Status != glovebox.StatusOK {
		return 1
	}
	return 0
}

func TestConformanceClient(t *testing.T) {
	node := npmtest.Node(t) // the suite needs Node 22 or newer
	dir := npmtest.Dir(t, "@modelcontextprotocol/conformance")
	args := []string{filepath.Join(dir, "node_modules/@modelcontextprotocol/conformance/dist/index.js")}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range conformanceScenarios {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, append(args, "client", "--command", exe, "--scenario", sc)...)
			cmd.Env = append(os.Environ(), "MCPTOOLS_TEST_SERVER=conformance-client")
			cmd.Dir = t.TempDir()
			out, err := cmd.CombinedOutput()
			if err != nil || strings.Contains(string(out), "FAILURE") {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("%s", out)
		})
	}
}
