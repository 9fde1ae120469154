package executor_test

import (
	"context"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
)

// TestRecordedRunningBeforeItsSlot: a job arriving while every slot is
// busy is recorded running (durably, started) while it waits for its
// slot, so that its slot is busy only with work, never with its write;
// it is reported queued until it has the slot, and ends completed once
// it has run.
func TestRecordedRunningBeforeItsSlot(t *testing.T) {
	p := startInproc(t, 1, func(c *executor.Config) { c.Tenants[1].MaxConcurrentRuns = 1 })
	cb := p.client(t, p.toks.b)
	ctx := context.Background()
	const marker = "59.2653"
	first := make(chan error, 1)
	go func() {
		_, err := cb.Run(ctx, remote.Request{IdempotencyKey: "n1", Command: box.Command{Argv: []string{"sleep", marker}}})
		first <- err
	}()
	state := func(key string) string { s, _, _ := cb.State(ctx, key); return s }
	waitFor(t, func() bool { return state("n1") == "running" })
	// Shown running, n1 may not hold its slot yet (a slot looked free);
	// n2 must arrive once it does, or it may take the slot first.
	waitFor(t, func() bool { return sleeping(marker) })
	second := make(chan error, 1)
	go func() {
		_, err := cb.Run(ctx, remote.Request{IdempotencyKey: "n2", Command: box.Command{Argv: []string{"true"}}})
		second <- err
	}()
	waitFor(t, func() bool { return state("n2") == "queued" })
	if st, started := p.srv.Stored("b", "n2"); st != "running" || !started {
		t.Errorf("n2 waiting for its slot is stored %q (started %v), want running, started", st, started)
	}
	if _, err := cb.Cancel(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []chan error{first, second} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := p.srv.Stored("b", "n2"); st != "completed" {
		t.Errorf("n2 after its run: %q, want completed", st)
	}
}
