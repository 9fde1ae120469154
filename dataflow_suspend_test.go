package glovebox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Labels and tokens across suspension: a session suspended idle, a
// program paused at a tool call and a session's eval paused at a tool
// call each continue in a new process (this test binary, run again) with
// the labels they had: the same token for a value read before the pause,
// a sink that still refuses it, a permitted tool that still gets it from
// its token, and Reveal.

// flowChildEnv names the directory a child of the tests below works in.
const flowChildEnv = "GLOVEBOX_FLOW_CHILD"

// newFlowSuspendRuntime is the flow tools plus "hold", which accepts
// emails and which a BeforeCall policy suspends, on a Runtime that can seal states (the
// same key in every process).
func newFlowSuspendRuntime(t *testing.T) *glovebox.Runtime {
	t.Helper()
	f := newFlowTools(t)
	if err := f.ts.Func("hold", func(v any) any { return v }); err != nil {
		t.Fatal(err)
	}
	if err := f.ts.Sink("hold", glovebox.SinkPolicy{Accepts: []glovebox.Kind{glovebox.KindEmail}}); err != nil {
		t.Fatal(err)
	}
	hooks := glovebox.Hooks{BeforeCall: func(_ context.Context, name string, _ glovebox.Args) error {
		if name == "hold" {
			return glovebox.SuspendCall("a person decides")
		}
		return nil
	}}
	return newRuntime(t, glovebox.Config{Tools: &f.ts, StateKeys: testKeyring(t), PoolSize: -1, ScratchDir: ownScratch(t), Hooks: hooks})
}

// flowAfter is what a child reports: the token of the email read before
// the pause, what the sink and the permitted tool made of it, Reveal of
// the token, and everything the child's Results showed.
type flowAfter struct {
	Token, Post, Find, Revealed string
	Shown                       []string
}

// afterPause is the program a child runs once the state is resumed: $e
// was read before the pause.
const afterPause = `[$e, (post("to: " + $e.upcase) rescue $!.class.name), find($e)]`

// flowParent skips the test in a child, and returns the runtime the
// parent pauses with.
func flowParent(t *testing.T) *glovebox.Runtime {
	t.Helper()
	if os.Getenv(flowChildEnv) != "" {
		t.Skip("in a child")
	}
	return newFlowSuspendRuntime(t)
}

// runFlowChild runs the child test name in dir and returns its report.
func runFlowChild(t *testing.T, dir, name string) flowAfter {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), flowChildEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "after.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a flowAfter
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// wantFlowAfter checks a child's report against the token the parent saw.
func wantFlowAfter(t *testing.T, a flowAfter, token string) {
	t.Helper()
	if !tokenRE.MatchString(token) {
		t.Fatalf("before the pause the email showed as %q, want a token", token)
	}
	if a.Token != token {
		t.Errorf("the email's token was %s before the pause and %s after", token, a.Token)
	}
	if a.Post != "Glovebox::ToolDenied" {
		t.Errorf("after the resume post got the email: %q", a.Post)
	}
	if a.Find != "sent" {
		t.Errorf("after the resume find (which accepts emails) answered %q", a.Find)
	}
	if a.Revealed != flowEmail {
		t.Errorf("Reveal(%s) after the resume = %q, want %q", token, a.Revealed, flowEmail)
	}
	for _, s := range a.Shown {
		if containsSecret(s) {
			t.Errorf("a Result after the resume shows a labelled value: %s", s)
		}
	}
}

// containsSecret reports whether s holds flowTools' email in any case.
func containsSecret(s string) bool { return strings.Contains(strings.ToLower(s), "lovelace") }

// writeFlowAfter writes a child's report: res is the Result of
// afterPause, shown the Results it made.
func writeFlowAfter(t *testing.T, dir string, res *glovebox.Result, shown ...*glovebox.Result) {
	t.Helper()
	wantStatus(t, res, glovebox.StatusOK)
	v, _ := res.Value.([]any)
	if len(v) != 3 {
		t.Fatalf("value %#v", res.Value)
	}
	a := flowAfter{}
	a.Token, _ = v[0].(string)
	a.Post, _ = v[1].(string)
	a.Find, _ = v[2].(string)
	a.Revealed = res.Reveal(a.Token)
	for _, r := range append(shown, res) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		a.Shown = append(a.Shown, string(b))
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "after.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDataflowSessionSuspendInNewProcess: an idle session suspended
// after reading a labelled value resumes in a new process with its
// labels and tokens.
func TestDataflowSessionSuspendInNewProcess(t *testing.T) {
	r := flowParent(t)
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	res := sessionEval(t, s, `$e = customer["email"]`)
	wantStatus(t, res, glovebox.StatusOK)
	token, _ := res.Value.(string)
	state, err := s.Suspend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "state"), state)
	wantFlowAfter(t, runFlowChild(t, dir, "TestDataflowSessionSuspendChild"), token)
}

// TestDataflowSessionSuspendChild is TestDataflowSessionSuspendInNewProcess's child.
func TestDataflowSessionSuspendChild(t *testing.T) {
	dir, state := flowChildInput(t, "TestDataflowSessionSuspendInNewProcess")
	r := newFlowSuspendRuntime(t)
	s, err := r.ResumeSession(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	writeFlowAfter(t, dir, sessionEval(t, s, afterPause))
}

// TestDataflowPausedCallInNewProcess: a program paused at a tool call
// whose argument is a labelled value shows the token in its pending call
// and transcript, and continues in a new process with the same token.
func TestDataflowPausedCallInNewProcess(t *testing.T) {
	r := flowParent(t)
	res := eval(t, r, `$e = customer["email"]; hold($e); `+afterPause)
	wantStatus(t, res, glovebox.StatusSuspended)
	token, _ := res.Pending.Args.Positional[0].(string)
	b, _ := json.Marshal(res)
	pb, _ := json.Marshal(res.Pending)
	if containsSecret(string(b)) || containsSecret(string(pb)) {
		t.Fatalf("the paused Result shows the email: %s %s", b, pb)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "state"), res.State)
	wantFlowAfter(t, runFlowChild(t, dir, "TestDataflowPausedCallChild"), token)
}

// TestDataflowPausedCallChild is TestDataflowPausedCallInNewProcess's child.
func TestDataflowPausedCallChild(t *testing.T) {
	dir, state := flowChildInput(t, "TestDataflowPausedCallInNewProcess")
	r := newFlowSuspendRuntime(t)
	res, err := r.Continue(context.Background(), state, glovebox.Answer{Value: 1})
	if err != nil {
		t.Fatal(err)
	}
	writeFlowAfter(t, dir, res)
}

// TestDataflowPausedSessionEvalInNewProcess: a session whose second eval
// pauses at a tool call resumes in a new process paused, with the
// pending call's argument as the same token, and after Continue a
// further eval still has the labels of the first.
func TestDataflowPausedSessionEvalInNewProcess(t *testing.T) {
	r := flowParent(t)
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	token, _ := sessionEval(t, s, `$e = customer["email"]`).Value.(string)
	res := sessionEval(t, s, `hold($e)`)
	wantStatus(t, res, glovebox.StatusSuspended)
	if got := s.Pending().Args.Positional[0]; got != token {
		t.Fatalf("the paused session's pending call shows %v, want %s", got, token)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "state"), res.State)
	writeFile(t, filepath.Join(dir, "token"), []byte(token))
	wantFlowAfter(t, runFlowChild(t, dir, "TestDataflowPausedSessionEvalChild"), token)
}

// TestDataflowPausedSessionEvalChild is TestDataflowPausedSessionEvalInNewProcess's child.
func TestDataflowPausedSessionEvalChild(t *testing.T) {
	dir, state := flowChildInput(t, "TestDataflowPausedSessionEvalInNewProcess")
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	r := newFlowSuspendRuntime(t)
	ctx := context.Background()
	s, err := r.ResumeSession(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Pending().Args.Positional[0]; got != string(token) {
		t.Fatalf("the resumed session's pending call shows %v, want %s", got, token)
	}
	done, err := s.Continue(ctx, glovebox.Answer{Approved: true})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, done, glovebox.StatusOK)
	if done.Value != string(token) {
		t.Fatalf("the continued eval's value %v, want the token %s", done.Value, token)
	}
	writeFlowAfter(t, dir, sessionEval(t, s, afterPause), done)
}

// flowChildInput returns a child's directory and its state, or skips the
// test outside a child of parent.
func flowChildInput(t *testing.T, parent string) (string, []byte) {
	dir := os.Getenv(flowChildEnv)
	if dir == "" {
		t.Skip("run by " + parent)
	}
	b, err := os.ReadFile(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, b
}

// A sink that sends forbidden kinds to approval, with an Approver that
// leaves the decision to a person later (SuspendCall): the eval suspends
// at the call, its pending call showing the token, and once approved the
// tool runs with the real value.
func TestDataflowApprovalSuspends(t *testing.T) {
	f := newFlowTools(t)
	hooks := glovebox.Hooks{Approver: func(context.Context, string, glovebox.Args) error { return glovebox.SuspendCall("a person decides") }}
	r := newRuntime(t, glovebox.Config{Tools: &f.ts, StateKeys: testKeyring(t), PoolSize: -1, ScratchDir: ownScratch(t), Hooks: hooks})
	res := eval(t, r, `e = customer["email"]; [notify(e), e]`)
	wantStatus(t, res, glovebox.StatusSuspended)
	p := res.Pending
	if p == nil || p.Name != "notify" || !p.Approval || !tokenRE.MatchString(fmt.Sprint(p.Args.Positional)) || f.runs.Load() != 0 {
		t.Fatalf("pending %+v, runs %d", p, f.runs.Load())
	}
	done, err := r.Continue(context.Background(), res.State, glovebox.Answer{Approved: true})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, done, glovebox.StatusOK)
	if len(f.sent) != 1 || f.sent[0] != flowEmail {
		t.Errorf("the approved call sent %q, want the email", f.sent)
	}
	if c := done.ToolCalls[len(done.ToolCalls)-1]; c.Approval != "approved" || c.Outcome != glovebox.OutcomeOK || containsSecret(fmt.Sprint(c.Args)) {
		t.Errorf("transcript %+v", c)
	}
}
