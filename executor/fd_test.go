package executor_test

import (
	"context"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
)

// TestExecutorChildrenInheritNoDescriptors: descriptors the executor's
// process holds without close-on-exec (a file and a directory, as a
// supervisor or shell may leave them) reach neither a tenant's run nor an
// eval worker, looked at from inside the run and, for the worker, from
// the host while its eval waits on a tool call.
func TestExecutorChildrenInheritNoDescriptors(t *testing.T) {
	p := spawntest.Plant(t)
	x := startWorkerEvals(t, nil, -1)
	c := x.client(t, x.toks.a)
	res, err := c.Run(context.Background(), remote.Request{IdempotencyKey: "fd-probe", Command: box.Command{Shell: p.Probe()}})
	if err != nil {
		t.Fatal(err)
	}
	p.Check(t, "tenant run", res.Stdout+res.Stderr)

	var ts gb.Toolset
	var holders []string
	if err := ts.Func("look", func() string { holders = p.Holders(); return "looked" }); err != nil {
		t.Fatal(err)
	}
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ev, err := c.Evaluator(rt).Eval(context.Background(), `look`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, ev, gb.StatusOK)
	if ev.Value != "looked" {
		t.Fatalf("value %v", ev.Value)
	}
	if len(holders) > 0 {
		t.Errorf("the eval worker holds planted descriptors: %q", holders)
	}
}
