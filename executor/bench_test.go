package executor_test

import (
	"context"
	"fmt"
	"testing"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// BenchmarkRun: one `true` run on bubblewrap directly, and through an
// in-process executor over TLS on loopback (new key each time: every
// iteration really runs), so the executor's overhead is the difference
// measured in the same process:
//
//	go test -run '^$' -bench BenchmarkRun -benchtime 40x ./executor
func BenchmarkRun(b *testing.B) {
	requireBwrap(b)
	direct, err := bwrap.New(bwrap.Config{})
	if err != nil {
		b.Fatal(err)
	}
	cmd := box.Command{Argv: []string{"true"}}
	b.Run("bwrap-direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := direct.Run(context.Background(), cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	p := startInproc(b, 1, nil)
	c := p.client(b, p.toks.a)
	b.Run("executor", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := c.Run(context.Background(), remote.Request{Command: cmd, IdempotencyKey: fmt.Sprintf("bench-%d", i)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEvalTenants: `add(1, 2)` evals through an in-process executor,
// from one tenant and from two alternating, with each tenant's VMs its
// own (the default) and shared across tenants: what keeping tenants
// apart costs, measured in one process:
//
//	go test -run '^$' -bench BenchmarkEvalTenants -benchtime 300x ./executor
func BenchmarkEvalTenants(b *testing.B) {
	for _, share := range []bool{false, true} {
		p := startInproc(b, 1, nil)
		if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{ShareVMsAcrossTenants: share}); err != nil {
			b.Fatal(err)
		}
		a := newApp(b, gb.Limits{})
		evs := []*client.Evaluator{p.client(b, p.toks.a).Evaluator(a.rt), p.client(b, p.toks.b).Evaluator(a.rt)}
		for _, tenants := range []int{1, 2} {
			b.Run(fmt.Sprintf("share=%v/tenants=%d", share, tenants), func(b *testing.B) {
				i := 0
				for b.Loop() {
					res, err := evs[i%tenants].EvalWith(context.Background(), "add(1, 2)", client.EvalOptions{})
					if err != nil || res.Status != gb.StatusOK {
						b.Fatal(err, res)
					}
					i++
				}
			})
		}
	}
}
