package glovebox_test

import (
	"context"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
)

// TestToolRelaysEngineAnswers: a tool inside this module (the executor's
// relay of a client's tool) can hand the guest another toolset's verdict
// unchanged — a core class such as ArgumentError, which ToolError may not
// name, or an abort with its status — while a user's ToolError asking for
// ArgumentError still gets Glovebox::ToolError.
func TestToolRelaysEngineAnswers(t *testing.T) {
	var ts glovebox.Toolset
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ts.Add("bad_args", func(context.Context, glovebox.Args) (any, error) {
		return nil, &engine.GuestError{Class: "ArgumentError", Message: "relayed"}
	}))
	must(ts.Add("spent", func(context.Context, glovebox.Args) (any, error) {
		return nil, &engine.Abort{Status: engine.StatusToolBudgetExceeded, Message: "the client's budget is spent"}
	}))
	must(ts.Add("user", func(context.Context, glovebox.Args) (any, error) {
		return nil, &glovebox.ToolError{Class: "ArgumentError", Message: "mine"}
	}))
	r, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1})
	must(err)
	defer r.Close()

	res := eval(t, r, `begin; bad_args; rescue ArgumentError => e; "#{e.class}: #{e.message}"; end`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != "ArgumentError: relayed" {
		t.Errorf("relayed error: %v", res.Value)
	}
	if res.ToolCalls[0].Error != "relayed" {
		t.Errorf("transcript: %+v", res.ToolCalls)
	}
	res = eval(t, r, `begin; user; rescue Glovebox::ToolError => e; e.class.name; end`)
	if res.Value != "Glovebox::ToolError" {
		t.Errorf("a user's ToolError named ArgumentError became %v", res.Value)
	}
	res = eval(t, r, `begin; spent; rescue Exception; end; 1`)
	wantStatus(t, res, glovebox.StatusToolBudgetExceeded)
	if res.Error == nil || res.Error.Message != "the client's budget is spent" {
		t.Errorf("abort: %+v", res.Error)
	}
}
