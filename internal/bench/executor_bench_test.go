package bench

import (
	"context"
	"flag"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/internal/pgtest"
)

// benchFilter is the -test.bench pattern this run was given.
func benchFilter() string {
	if f := flag.Lookup("test.bench"); f != nil {
		return f.Value.String()
	}
	return ""
}

// BenchmarkExecutorEval is the `1+1` row at 2 workers (4 clients) as a
// Go benchmark, for a CPU profile of the whole request (client, TLS,
// HTTP/2, store, eval) beside the same eval in-process, with the
// processor time per eval (cpu-µs/op):
//
//	go test -run '^$' -bench BenchmarkExecutorEval -benchtime 2000x -cpuprofile cpu.out ./internal/bench
//
// -bench 'ExecutorEval/postgres' runs it through an executor on a
// PostgreSQL store instead.
func BenchmarkExecutorEval(b *testing.B) {
	ctx := context.Background()
	const workers = 2
	bx, err := bwrap.New(bwrap.Config{})
	if err != nil {
		b.Skip(err)
	}
	x, err := startExecServer(ctx, b.TempDir(), workers, bx, "")
	if err != nil {
		b.Fatal(err)
	}
	defer x.done()
	rt, err := glovebox.New(ctx, glovebox.Config{PoolSize: workers})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	cases := []struct {
		name string
		f    func(int) error
	}{{"executor", evalWith(ctx, x.c.Evaluator(rt), "1+1")}, {"in-process", evalWith(ctx, rt, "1+1")}}
	// The same through an executor on PostgreSQL (a server of its own,
	// started when this case is asked for: -bench 'ExecutorEval/postgres'),
	// with the server's processor time per eval (pg-cpu-µs/op).
	var pg *pgtest.Server
	if strings.Contains(benchFilter(), "postgres") {
		if pg, err = pgtest.Start(); err != nil {
			b.Fatal(err)
		}
		defer pg.Stop()
		xp, err := startExecServer(ctx, "", workers, bx, pg.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer xp.done()
		cases = append(cases, struct {
			name string
			f    func(int) error
		}{"postgres", evalWith(ctx, xp.c.Evaluator(rt), "1+1")})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			c.f(0)
			b.ResetTimer()
			var pg0 int64
			if pg != nil {
				pg0 = pg.CPU()
			}
			cpu0 := cpuTime()
			// The row's clients: 2 per worker, whatever GOMAXPROCS is
			// (b.RunParallel would start a multiple of it).
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 2 * workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if err := c.f(0); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// Processor time of the whole process (clients, executor,
			// engine) per eval: the figure the ratio depends on when the
			// cores are busy.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			if c.name == "postgres" { // clock ticks of 10 ms
				b.ReportMetric(float64(pg.CPU()-pg0)*10_000/float64(b.N), "pg-cpu-µs/op")
			}
		})
	}
}
