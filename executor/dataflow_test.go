package executor_test

import (
	"context"
	"strings"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestEvalLabelsRemote: a Runtime whose tools are labelled keeps its
// data-flow policy when its evals run on an executor: the labelled value
// shows as a token in the Result, and a tool that does not accept its
// kind refuses it, as in-process.
func TestEvalLabelsRemote(t *testing.T) {
	const email = "ada.lovelace@example.org"
	var ts gb.Toolset
	sent := 0
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ts.Func("profile", func() map[string]string { return map[string]string{"email": email} }))
	must(ts.Func("post", func(s string) string { sent++; return "posted" }))
	must(ts.Label("profile", gb.Label{Kind: gb.KindEmail, Path: "email"}))
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	must(err)
	defer rt.Close()
	code := `e = profile["email"]; puts e; r = (post("to #{e}") rescue $!.class.name); [e, r]`
	local, err := rt.Eval(context.Background(), code)
	must(err)
	p := startEvals(t)
	var streamed strings.Builder
	remote, err := p.client(t, p.toks.a).Evaluator(rt).EvalWith(context.Background(), code, client.EvalOptions{Stdout: &streamed})
	must(err)
	if strings.Contains(streamed.String(), email) || !strings.Contains(streamed.String(), "[[email:") {
		t.Errorf("streamed stdout %q, want the token", streamed.String())
	}
	if got := remote.Reveal(remote.Stdout); got != email+"\n" {
		t.Errorf("Reveal of the remote stdout: %q", got)
	}
	for _, c := range []struct {
		where string
		res   *gb.Result
	}{{"in-process", local}, {"remote", remote}} {
		shown := c.res.Stdout + " " + strings.Join(func() []string {
			v, _ := c.res.Value.([]any)
			var s []string
			for _, x := range v {
				s = append(s, x.(string))
			}
			return s
		}(), " ")
		if strings.Contains(shown, email) || !strings.Contains(shown, "Glovebox::ToolDenied") {
			t.Errorf("%s: the Result shows %q, want tokens and post refused", c.where, shown)
		}
	}
	if sent != 0 {
		t.Errorf("post ran %d times with the email", sent)
	}
}

// TestSessionLabelsRemote: a remote session's later eval knows the
// labelled values its earlier evals' calls handed out: it shows their
// tokens and its sinks refuse them.
func TestSessionLabelsRemote(t *testing.T) {
	const email = "grace.hopper@example.org"
	var ts gb.Toolset
	sent := 0
	if err := ts.Func("profile", func() map[string]string { return map[string]string{"email": email} }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Func("post", func(s string) string { sent++; return "posted" }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Label("profile", gb.Label{Kind: gb.KindEmail, Path: "email"}); err != nil {
		t.Fatal(err)
	}
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	p := startEvals(t)
	ctx := context.Background()
	s, err := p.client(t, p.toks.a).Evaluator(rt).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if res, err := s.Eval(ctx, `$e = profile["email"]; 1`); err != nil || res.Status != gb.StatusOK {
		t.Fatalf("first eval: %v %v", res, err)
	}
	res, err := s.Eval(ctx, `puts $e; [$e, (post($e) rescue $!.class.name)]`)
	if err != nil {
		t.Fatal(err)
	}
	shown := res.Stdout + fmtValue(res.Value)
	if strings.Contains(shown, email) || !strings.Contains(res.Stdout, "[[email:") || !strings.Contains(shown, "Glovebox::ToolDenied") || sent != 0 {
		t.Errorf("second eval shows %q and post ran %d times, want tokens and post refused", shown, sent)
	}
}

// fmtValue joins the strings of a list value, each after a space.
func fmtValue(v any) string {
	b := strings.Builder{}
	if l, ok := v.([]any); ok {
		for _, x := range l {
			b.WriteString(" ")
			if s, ok := x.(string); ok {
				b.WriteString(s)
			}
		}
	}
	return b.String()
}
