package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// benchMidEval is the mid-size data eval of the worker rows: it builds,
// filters and summarises 500 records (a few hundred KB of objects) and
// returns a small hash.
const benchMidEval = `rows = (1..500).map { |i| { "id" => i, "name" => "user#{i}", "score" => (i * 37) % 101, "tags" => ["a#{i % 7}", "b#{i % 11}"] } }
top = rows.select { |r| r["score"] > 50 }.sort_by { |r| -r["score"] }.first(20)
{ "n" => rows.size, "top" => top.map { |r| r["id"] }, "sum" => rows.sum { |r| r["score"] }, "json" => JSON.generate(top).size }`

// benchVM adds the rows about what an isolated VM costs: a fresh VM per
// eval back-to-back and from a warm pool with pauses, each beside the
// floor (the same eval in a VM that already ran one); evals/s with 2
// workers against 1 on the default pool; and process start to first
// result with its peak memory, beside a bare process start.
func benchVM(ctx context.Context, samples int, row func(met string, cols ...string)) error {
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "NO"
	}
	fresh, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1})
	if err != nil {
		return err
	}
	defer fresh.Close()
	pooled, err := glovebox.New(ctx, glovebox.Config{}) // the default pool
	if err != nil {
		return err
	}
	defer pooled.Close()
	sess, err := fresh.NewSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	eval := func(f func(context.Context, string) (*glovebox.Result, error), code string) (time.Duration, error) {
		start := time.Now()
		res, err := f(ctx, code)
		d := time.Since(start)
		if err == nil && res.Status != glovebox.StatusOK {
			err = fmt.Errorf("%q ended %s: %+v", code, res.Status, res.Error)
		}
		return d, err
	}
	// Warm up all three paths, then interleave them so drift in the
	// machine's speed hits each alike.
	for range 50 {
		for _, f := range []func(context.Context, string) (*glovebox.Result, error){fresh.Eval, pooled.Eval, sess.Eval} {
			if _, err := eval(f, "1+1"); err != nil {
				return err
			}
		}
	}
	var b2b, floor, pool, gapFresh []time.Duration
	for range samples {
		for _, m := range []struct {
			f   func(context.Context, string) (*glovebox.Result, error)
			d   *[]time.Duration
			gap time.Duration
		}{{fresh.Eval, &b2b, 0}, {sess.Eval, &floor, 0}, {pooled.Eval, &pool, 10 * time.Millisecond}, {fresh.Eval, &gapFresh, 10 * time.Millisecond}} {
			time.Sleep(m.gap)
			d, err := eval(m.f, "1+1")
			if err != nil {
				return err
			}
			*m.d = append(*m.d, d)
		}
	}
	fl, bb, pl, gf := summarize(floor), summarize(b2b), summarize(pool), summarize(gapFresh)
	st := pooled.Stats()
	row(yes(bb.p50 <= 150*time.Microsecond && bb.p99 <= time.Millisecond), "fresh VM + 1+1, back-to-back, no pool (p50 / p99)",
		us(bb.p50)+" / "+us(bb.p99), "floor: 1+1 in a VM that already ran one "+us(fl.p50)+" / "+us(fl.p99),
		fmt.Sprintf("%.2fx floor", float64(bb.p50)/float64(fl.p50)), "≤ 150 µs / ≤ 1 ms")
	row(yes(pl.p50 <= 150*time.Microsecond && pl.p99 <= time.Millisecond && pl.p50 <= gf.p50), "fresh VM + 1+1 from the default pool, 10 ms between evals (p50 / p99)",
		us(pl.p50)+" / "+us(pl.p99), "VM made per eval, same gaps "+us(gf.p50)+" / "+us(gf.p99),
		fmt.Sprintf("%.2fx made, %.2fx floor", float64(pl.p50)/float64(gf.p50), float64(pl.p50)/float64(fl.p50)),
		"≤ 150 µs / ≤ 1 ms, ≤ made")
	row("-", "pool hit rate over the run", fmt.Sprintf("%d of %d", st.PoolHits, st.PoolHits+st.PoolMisses), "-", "-", "-")

	// Throughput, 1 and 2 workers on the default pool, alternating
	// 1-second rounds.
	rate := func(workers int, code string) (float64, error) {
		var n atomic.Int64
		var firstErr error
		var once sync.Once
		deadline := time.Now().Add(time.Second)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					if _, err := eval(pooled.Eval, code); err != nil {
						once.Do(func() { firstErr = err })
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return float64(n.Load()), firstErr
	}
	for _, w := range []struct{ name, code string }{{"1+1", "1+1"}, {"a mid-size data eval (500 records)", benchMidEval}} {
		if _, err := rate(1, w.code); err != nil { // warm up
			return err
		}
		var r1s, r2s []float64
		for range 5 {
			r1, err := rate(1, w.code)
			if err != nil {
				return err
			}
			r2, err := rate(2, w.code)
			if err != nil {
				return err
			}
			r1s, r2s = append(r1s, r1), append(r2s, r2)
		}
		slices.Sort(r1s)
		slices.Sort(r2s)
		r1, r2 := r1s[len(r1s)/2], r2s[len(r2s)/2]
		row(yes(r2 >= 1.8*r1), "evals/s, "+w.name+", 2 workers vs 1, default pool (median of 5)", fmt.Sprintf("%.0f/s", r2),
			fmt.Sprintf("1 worker %.0f/s", r1), fmt.Sprintf("%.2fx", r2/r1), "≥ 1.8x")
	}

	// Process start to first result, warm cache, beside a bare start of
	// ruby if it is here (else /bin/true), alternating.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	base, baseName := []string{"/bin/true"}, "`/bin/true` spawn"
	if ruby, err := exec.LookPath("ruby"); err == nil {
		base, baseName = []string{ruby, "--disable-gems", "-e", "1+1"}, "`ruby --disable-gems -e 1+1`"
	}
	run := func(argv ...string) (time.Duration, int64, error) {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			return 0, 0, fmt.Errorf("%v: %w: %s", argv, err, out)
		}
		ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		var rss int64
		if ru != nil {
			rss = ru.Maxrss * 1024
		}
		return d, rss, nil
	}
	var gd, bd []time.Duration
	var grss, brss []int64
	for range 11 {
		d, rss, err := run(self, "eval", "-e", "1+1")
		if err != nil {
			return err
		}
		gd, grss = append(gd, d), append(grss, rss)
		if d, rss, err = run(base...); err != nil {
			return err
		}
		bd, brss = append(bd, d), append(brss, rss)
	}
	g, b := summarize(gd), summarize(bd)
	slices.Sort(grss)
	slices.Sort(brss)
	gr, br := grss[len(grss)/2], brss[len(brss)/2]
	row(yes(g.p50 <= 30*time.Millisecond), "process start → first result, `glovebox eval -e 1+1`, warm cache (median of 11)", ms(g.p50),
		baseName+" "+ms(b.p50), fmt.Sprintf("%.1fx", float64(g.p50)/float64(b.p50)), "≤ 30 ms")
	row(yes(gr <= 60<<20), "same, peak resident memory (median of 11)", fmt.Sprintf("%.1f MiB", float64(gr)/(1<<20)),
		fmt.Sprintf("%s %.1f MiB", baseName, float64(br)/(1<<20)), fmt.Sprintf("%.1fx", float64(gr)/float64(br)), "≤ 60 MiB")
	return nil
}
