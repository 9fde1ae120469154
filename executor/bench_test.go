package executor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/remote"
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
