package executor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// TestCodeModeRoute: POST /v1/codemode gives a client in another
// language the description codemode.New makes for the same tools and
// limits in-process, and the model's JSON for an eval's result as
// Tool.Run makes it; bad input is bad_request.
func TestCodeModeRoute(t *testing.T) {
	p := startEvals(t)
	a := newApp(t, gb.Limits{})
	local, err := codemode.New(codemode.Config{Runtime: a.rt, Instructions: "Be brief."})
	if err != nil {
		t.Fatal(err)
	}
	req := wire.CodeModeRequest{Instructions: "Be brief."}
	for _, d := range a.rt.ToolDocs() {
		tool := wire.CodeModeTool{Name: d.Name, Description: d.Description, Returns: d.Returns, Result: d.Result,
			Example: d.Example, NeedsApproval: d.NeedsApproval}
		for _, pa := range d.Params {
			tool.Params = append(tool.Params, wire.CodeModeParam{Name: pa.Name, Description: pa.Description,
				Schema: pa.Schema, Required: pa.Required, Variadic: pa.Variadic, Keywords: pa.Keywords})
		}
		req.Tools = append(req.Tools, tool)
	}
	code := `puts "sum"; [1 + 2, 2**70]`
	_, stream := rawDo(t, p, p.toks.a, "POST", "/v1/evals", `{"code":`+quote(code)+`,"limits":{}}`)
	var rec struct {
		Record wire.Record `json:"record"`
	}
	sc := bufio.NewScanner(strings.NewReader(stream))
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"type":"result"`) {
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rec.Record.Eval == nil {
		t.Fatalf("no eval record in %s", stream)
	}
	req.Result = rec.Record.Eval
	body, _ := json.Marshal(req)
	status, out := rawDo(t, p, p.toks.a, "POST", wire.PathCodeMode, string(body))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, out)
	}
	var resp wire.CodeModeResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Name != local.Name() || resp.Description != local.Description() || string(resp.InputSchema) != string(local.InputSchema()) {
		t.Errorf("the route's tool differs from codemode.New's:\n%s\n---\n%s", resp.Description, local.Description())
	}
	lo, err := local.Run(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if l, r := stripDuration(string(lo.Output)), stripDuration(string(resp.Output)); l != r || resp.IsError {
		t.Errorf("model output differs:\n in-process %s\n route      %s", l, r)
	}
	for _, bad := range []string{`{"name":"no spaces allowed"}`, `{"tools":[{"name":"1x"}]}`, `{"max_output":10}`, `{"unknown":1}`} {
		if status, out := rawDo(t, p, p.toks.a, "POST", wire.PathCodeMode, bad); status != http.StatusBadRequest || !strings.Contains(out, "bad_request") {
			t.Errorf("%s: %d %s", bad, status, out)
		}
	}
	if status, _ := rawDo(t, p, "gbx_wrong", "POST", wire.PathCodeMode, `{}`); status != http.StatusUnauthorized {
		t.Errorf("bad token: %d", status)
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// stripDuration drops the "duration_ms" fields, which differ run to run.
func stripDuration(s string) string {
	for {
		i := strings.Index(s, `"duration_ms"`)
		if i < 0 {
			return s
		}
		j := strings.IndexAny(s[i:], ",}")
		s = s[:i] + s[i+j:]
	}
}
