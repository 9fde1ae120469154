package glovebox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// approvalRuntime has a tool "transfer" that needs approval and counts its
// runs, and a tool "balance" that does not.
func approvalRuntime(t *testing.T, limits glovebox.Limits, approver func(context.Context, string, glovebox.Args) error) (*glovebox.Runtime, *atomic.Int32) {
	t.Helper()
	var runs atomic.Int32
	var ts glovebox.Toolset
	if err := ts.Func("transfer", func(amount int) int { runs.Add(1); return amount }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Func("balance", func() int { return 10 }); err != nil {
		t.Fatal(err)
	}
	if err := ts.RequireApproval("transfer"); err != nil {
		t.Fatal(err)
	}
	return newRuntime(t, glovebox.Config{Tools: &ts, Limits: limits, Hooks: glovebox.Hooks{Approver: approver}}), &runs
}

func TestApprovalApproved(t *testing.T) {
	var asked []string
	r, runs := approvalRuntime(t, glovebox.Limits{}, func(_ context.Context, tool string, args glovebox.Args) error {
		b, _ := json.Marshal(args.Positional)
		asked = append(asked, tool+string(b))
		return nil
	})
	res := eval(t, r, "[balance, transfer(5)]")
	if res.Status != glovebox.StatusOK || runs.Load() != 1 {
		t.Fatalf("got %v %v, runs %d", res.Status, res.Error, runs.Load())
	}
	if strings.Join(asked, ",") != "transfer[5]" {
		t.Fatalf("the approver was asked %q; want only transfer[5]", asked)
	}
	if res.ToolCalls[0].Approval != "" || res.ToolCalls[1].Approval != "approved" {
		t.Fatalf("transcript approvals %q, %q", res.ToolCalls[0].Approval, res.ToolCalls[1].Approval)
	}
	if b, _ := json.Marshal(res.ToolCalls[1]); !strings.Contains(string(b), `"approval":"approved"`) {
		t.Fatalf("transcript JSON lacks the approval: %s", b)
	}
	if docs := r.ToolDocs(); docs[0].NeedsApproval || !docs[1].NeedsApproval {
		t.Fatalf("ToolDocs NeedsApproval: %+v", docs)
	}
}

func TestApprovalDeniedIsRescuable(t *testing.T) {
	r, runs := approvalRuntime(t, glovebox.Limits{}, func(context.Context, string, glovebox.Args) error {
		return errors.New("the operator said no")
	})
	res := eval(t, r, `begin; transfer(5); rescue Glovebox::ToolDenied => e; [e.class.name, e.message, e.is_a?(Glovebox::ToolError)]; end`)
	if res.Status != glovebox.StatusOK || runs.Load() != 0 {
		t.Fatalf("got %v %v, runs %d", res.Status, res.Error, runs.Load())
	}
	want := []any{"Glovebox::ToolDenied", "the operator said no", true}
	if b, w := mustJSON(res.Value), mustJSON(want); b != w {
		t.Fatalf("value %s, want %s", b, w)
	}
	c := res.ToolCalls[0]
	if c.Approval != "denied" || c.Error != "the operator said no" {
		t.Fatalf("transcript %+v", c)
	}
	// Unrescued, the denial ends the eval as an error naming the class.
	res = eval(t, r, "transfer(5)")
	if res.Status != glovebox.StatusError || res.Error.Class != "Glovebox::ToolDenied" {
		t.Fatalf("got %v %+v", res.Status, res.Error)
	}
}

func TestApprovalNoApproverDenies(t *testing.T) {
	r, runs := approvalRuntime(t, glovebox.Limits{}, nil)
	res := eval(t, r, "transfer(1)")
	if res.Status != glovebox.StatusError || res.Error.Class != "Glovebox::ToolDenied" || !strings.Contains(res.Error.Message, "no approver") || runs.Load() != 0 {
		t.Fatalf("got %v %+v runs %d", res.Status, res.Error, runs.Load())
	}
}

// The wait for a decision does not use up the eval's Timeout; it has its
// own bound, after which the call is denied.
func TestApprovalWaitOutlastsTimeout(t *testing.T) {
	r, runs := approvalRuntime(t, glovebox.Limits{Timeout: 300 * time.Millisecond}, func(ctx context.Context, _ string, _ glovebox.Args) error {
		select {
		case <-time.After(900 * time.Millisecond): // three times the eval's Timeout
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	res := eval(t, r, "transfer(7)")
	if res.Status != glovebox.StatusOK || runs.Load() != 1 {
		t.Fatalf("a slow approval ended the eval: %v %+v", res.Status, res.Error)
	}
	// The clock runs again after the decision: a loop still times out.
	res = eval(t, r, "transfer(7); loop {}")
	if res.Status != glovebox.StatusTimeout {
		t.Fatalf("after approval, loop {} ended %v", res.Status)
	}
}

func TestApprovalTimeoutDenies(t *testing.T) {
	r, runs := approvalRuntime(t, glovebox.Limits{ApprovalTimeout: 200 * time.Millisecond}, func(context.Context, string, glovebox.Args) error {
		time.Sleep(2 * time.Second) // ignores its context: the bound still holds
		return nil
	})
	res := eval(t, r, `begin; transfer(1); rescue Glovebox::ToolDenied => e; e.message; end`)
	if res.Status != glovebox.StatusOK || res.Value != "no decision within 200ms" || runs.Load() != 0 {
		t.Fatalf("got %v %v %+v runs %d", res.Status, res.Value, res.Error, runs.Load())
	}
	if res.ToolCalls[0].Approval != "denied" {
		t.Fatalf("transcript %+v", res.ToolCalls[0])
	}
}

func TestApprovalCanceledWhileWaiting(t *testing.T) {
	asked := make(chan struct{})
	r, runs := approvalRuntime(t, glovebox.Limits{}, func(ctx context.Context, _ string, _ glovebox.Args) error {
		close(asked)
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-asked; cancel() }()
	res, err := r.Eval(ctx, "transfer(1)")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusCanceled || runs.Load() != 0 {
		t.Fatalf("got %v %+v runs %d", res.Status, res.Error, runs.Load())
	}
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Approval != "denied" {
		t.Fatalf("transcript %+v", res.ToolCalls)
	}
}

func TestApprovalInSession(t *testing.T) {
	r, runs := approvalRuntime(t, glovebox.Limits{}, func(_ context.Context, _ string, args glovebox.Args) error {
		if args.Positional[0].(int64) > 100 {
			return errors.New("over 100 needs a manager")
		}
		return nil
	})
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, _ := s.Eval(context.Background(), "x = transfer(50)")
	res2, _ := s.Eval(context.Background(), "begin; transfer(500); rescue Glovebox::ToolDenied => e; [x, e.message]; end")
	if res.Status != glovebox.StatusOK || mustJSON(res2.Value) != `[50,"over 100 needs a manager"]` || runs.Load() != 1 {
		t.Fatalf("got %v, %v %v, runs %d", res.Status, res2.Status, res2.Value, runs.Load())
	}
}

func TestRequireApprovalUnknownTool(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.RequireApproval("nope"); !errors.Is(err, glovebox.ErrInvalidTool) {
		t.Fatalf("got %v", err)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Glovebox::ToolDenied exists before any call is denied: a rescue clause
// naming it, reached by another exception first, is no NameError.
func TestToolDeniedDefinedBeforeUse(t *testing.T) {
	r := newRuntime(t, glovebox.Config{})
	res := eval(t, r, `begin; raise "other"; rescue Glovebox::ToolDenied; :denied; rescue => e; [e.class.name, Glovebox::ToolDenied.ancestors.include?(Glovebox::ToolError)]; end`)
	if fmt.Sprint(res.Value) != "[RuntimeError true]" {
		t.Fatalf("%v %+v", res.Value, res.Error)
	}
}
