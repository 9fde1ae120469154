package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/procmem"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// benchMidEval is the mid-size data eval of the worker rows: it builds,
// filters and summarises 500 records (a few hundred KB of objects) and
// returns a small hash.
const benchMidEval = `rows = (1..500).map { |i| { "id" => i, "name" => "user#{i}", "score" => (i * 37) % 101, "tags" => ["a#{i % 7}", "b#{i % 11}"] } }
top = rows.select { |r| r["score"] > 50 }.sort_by { |r| -r["score"] }.first(20)
{ "n" => rows.size, "top" => top.map { |r| r["id"] }, "sum" => rows.sum { |r| r["score"] }, "json" => JSON.generate(top).size }`

// benchVM adds the rows about what an isolated VM costs: a fresh VM per
// eval (rewound after the previous eval, and made from the snapshot with
// reuse off) back-to-back and from a warm pool with pauses, each beside
// the floor (the same eval in a VM that already ran one); evals/s with 2
// workers against 1 on the default pool; and process start to first
// result with its peak memory, beside a bare process start.
func benchVM(ctx context.Context, samples int, self string, row Row) error {
	fresh, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1})
	if err != nil {
		return err
	}
	defer fresh.Close()
	made, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1, DisableVMReuse: true})
	if err != nil {
		return err
	}
	defer made.Close()
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
		for _, f := range []func(context.Context, string) (*glovebox.Result, error){fresh.Eval, made.Eval, pooled.Eval, sess.Eval} {
			if _, err := eval(f, "1+1"); err != nil {
				return err
			}
		}
	}
	// Rounds of ten back-to-back evals each of fresh VMs and of the
	// floor, then ten each, 10 ms apart, of the pool, fresh VMs and the
	// floor.
	var b2b, b2bMade, b2bPool, floor, pool, gapFresh, gapFloor []time.Duration
	const gap = 10 * time.Millisecond
	type mode struct {
		f   func(context.Context, string) (*glovebox.Result, error)
		d   *[]time.Duration
		gap time.Duration
	}
	measure := func(m mode) error {
		time.Sleep(m.gap)
		d, err := eval(m.f, "1+1")
		*m.d = append(*m.d, d)
		return err
	}
	for round := range max(samples/10, 1) {
		// Each kind of eval leaves the caches (and, making VMs, the page
		// tables) in a different state for the next: rotate which comes
		// after which, round by round.
		modes := []mode{{fresh.Eval, &b2b, 0}, {made.Eval, &b2bMade, 0}, {pooled.Eval, &b2bPool, 0}, {sess.Eval, &floor, 0}}
		k := round % len(modes)
		for _, m := range append(modes[k:], modes[:k]...) {
			for range 10 {
				if err := measure(m); err != nil {
					return err
				}
			}
		}
		for range 10 {
			for _, m := range []mode{{pooled.Eval, &pool, gap}, {fresh.Eval, &gapFresh, gap}, {sess.Eval, &gapFloor, gap}} {
				if err := measure(m); err != nil {
					return err
				}
			}
		}
	}
	fl, bb, bm, bp, pl, gf, gfl := summarize(floor), summarize(b2b), summarize(b2bMade), summarize(b2bPool), summarize(pool), summarize(gapFresh), summarize(gapFloor)
	st := pooled.Stats()
	row(yes(float64(bb.p50) <= 1.3*float64(fl.p50) && bb.p99 <= time.Millisecond), "fresh VM + 1+1, back-to-back, no pool: a VM rewound after the last eval (p50 / p99)",
		us(bb.p50)+" / "+us(bb.p99), "floor: 1+1 in a VM that already ran one "+us(fl.p50)+" / "+us(fl.p99),
		fmt.Sprintf("%.2fx floor", float64(bb.p50)/float64(fl.p50)), "≤ 1.3x floor / ≤ 1 ms")
	row("-", "  same, each VM made from the snapshot in memory mapped anew, and freed (DisableVMReuse)", us(bm.p50)+" / "+us(bm.p99),
		"rewound VMs, above "+us(bb.p50), fmt.Sprintf("rewound %.2fx made", float64(bb.p50)/float64(bm.p50)), "-")
	row(yes(float64(bp.p50) <= 1.5*float64(fl.p50) && bp.p99 <= time.Millisecond && bp.p50 <= bm.p50), "fresh VM + 1+1 from the default pool, back-to-back (p50 / p99)",
		us(bp.p50)+" / "+us(bp.p99), "VM made per eval "+us(bm.p50)+" / "+us(bm.p99),
		fmt.Sprintf("%.2fx made, %.2fx floor", float64(bp.p50)/float64(bm.p50), float64(bp.p50)/float64(fl.p50)), "≤ 1.5x floor / ≤ 1 ms, ≤ made")
	row(yes(pl.p50 <= 150*time.Microsecond && pl.p99 <= time.Millisecond && pl.p50 <= gf.p50), "fresh VM + 1+1 from the default pool, 10 ms between evals (p50 / p99)",
		us(pl.p50)+" / "+us(pl.p99), "VM made per eval, same gaps "+us(gf.p50)+" / "+us(gf.p99),
		fmt.Sprintf("%.2fx made", float64(pl.p50)/float64(gf.p50)), "≤ 150 µs / ≤ 1 ms, ≤ made")
	row("-", "floor with the same 10 ms gaps (p50 / p99)", us(gfl.p50)+" / "+us(gfl.p99), "pooled, above "+us(pl.p50),
		fmt.Sprintf("pooled %.2fx floor", float64(pl.p50)/float64(gfl.p50)), "-")
	pages := "-"
	if n := st.MemoriesReused + st.VMsRewound; n > 0 {
		pages = fmt.Sprintf("%d VMs rewound and reused (%d rewinds tracked); %.0f pages (4 KiB) restored per reuse",
			st.VMsRewound, st.RewindsTracked, float64(st.PagesRestored)/float64(n))
	}
	row("-", "pool hits over the run (evals finding a VM ready)", fmt.Sprintf("%d of %d", st.PoolHits, st.PoolHits+st.PoolMisses), pages, "-", "-")

	// Throughput, 1 and 2 workers on the default pool, alternating
	// 1-second rounds.
	// Each round also records the process's CPU time and the time its
	// threads spent runnable but waiting for a CPU, so that what bounds
	// the second worker shows: more CPU per eval is contention inside the
	// process; time waiting for a CPU is other processes on the machine.
	type usage struct{ evals, cpu, wait time.Duration }
	var used [3]usage // by workers
	rate := func(workers int, code string) (float64, error) {
		cpu0, wait0 := processCPU(), runQueueWait()
		defer func() {
			used[workers].cpu += processCPU() - cpu0
			used[workers].wait += runQueueWait() - wait0
		}()
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
		used[workers].evals += time.Duration(n.Load())
		return float64(n.Load()), firstErr
	}
	for _, w := range []struct{ name, code string }{{"1+1", "1+1"}, {"a mid-size data eval (500 records)", benchMidEval}} {
		if _, err := rate(1, w.code); err != nil { // warm up
			return err
		}
		used = [3]usage{}
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
		per := func(u usage, d time.Duration) time.Duration { return d / max(u.evals, 1) }
		row("-", "  same, process CPU per eval, 2 workers vs 1", us(per(used[2], used[2].cpu)), "1 worker "+us(per(used[1], used[1].cpu)),
			fmt.Sprintf("%.2fx", float64(per(used[2], used[2].cpu))/float64(per(used[1], used[1].cpu))), "-")
		row("-", "  same, threads waiting for a CPU per eval, 2 workers vs 1", us(per(used[2], used[2].wait)), "1 worker "+us(per(used[1], used[1].wait)), "-", "-")
	}

	// Process start to first result, warm cache, beside a bare start of
	// ruby if it is here (else /bin/true), alternating.
	base, baseName := []string{"/bin/true"}, "`/bin/true` spawn"
	if ruby, err := exec.LookPath("ruby"); err == nil {
		base, baseName = []string{ruby, "--disable-gems", "-e", "1+1"}, "`ruby --disable-gems -e 1+1`"
	}
	run := func(argv ...string) (time.Duration, error) {
		start := time.Now()
		out, err := spawn.CombinedOutput(exec.CommandContext(ctx, argv[0], argv[1:]...))
		if err != nil {
			return 0, fmt.Errorf("%v: %w: %s", argv, err, out)
		}
		return time.Since(start), nil
	}
	var gd, bd []time.Duration
	var grss, brss []int64
	for range 11 {
		d, err := run(self, "eval", "-e", "1+1")
		if err != nil {
			return err
		}
		gd = append(gd, d)
		if d, err = run(base...); err != nil {
			return err
		}
		bd = append(bd, d)
		if rss, err := peakRSS(ctx, self, "eval", "-e", "1+1"); err == nil {
			grss = append(grss, rss)
		}
		if rss, err := peakRSS(ctx, base...); err == nil {
			brss = append(brss, rss)
		}
	}
	g, b := summarize(gd), summarize(bd)
	row(yes(g.p50 <= 30*time.Millisecond), "process start → first result, `glovebox eval -e 1+1`, warm cache (median of 11)", ms(g.p50),
		baseName+" "+ms(b.p50), fmt.Sprintf("%.1fx", float64(g.p50)/float64(b.p50)), "≤ 30 ms")
	if len(grss) == 0 || len(brss) == 0 {
		row("?", "same, peak resident memory", "not measured: needs GNU time at /usr/bin/time", "-", "-", "≤ 60 MiB")
		return nil
	}
	slices.Sort(grss)
	slices.Sort(brss)
	gr, br := grss[len(grss)/2], brss[len(brss)/2]
	row(yes(gr <= 60<<20), fmt.Sprintf("same, peak resident memory (median of %d)", len(grss)), fmt.Sprintf("%.1f MiB", float64(gr)/(1<<20)),
		fmt.Sprintf("%s %.1f MiB", baseName, float64(br)/(1<<20)), fmt.Sprintf("%.1fx", float64(gr)/float64(br)), "≤ 60 MiB")
	return nil
}

// peakRSS runs argv under GNU time and returns its peak resident memory
// in bytes. The rusage of a child this process starts cannot be used:
// Go starts children with vfork, so the kernel records this process's
// own peak as the child's (a bare /bin/true measured 105 MiB here).
// GNU time forks a small copy of itself instead.
func peakRSS(ctx context.Context, argv ...string) (int64, error) {
	f, err := os.CreateTemp("", "glovebox-bench-rss-")
	if err != nil {
		return 0, err
	}
	f.Close()
	defer os.Remove(f.Name())
	args := append([]string{"-f", "%M", "-o", f.Name()}, argv...)
	if out, err := spawn.CombinedOutput(exec.CommandContext(ctx, "/usr/bin/time", args...)); err != nil {
		return 0, fmt.Errorf("/usr/bin/time %v: %w: %s", argv, err, out)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, err
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/usr/bin/time printed %q", b)
	}
	return kib << 10, nil
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runQueueWait is the time this process's threads have spent runnable
// but waiting for a CPU (the second field of each thread's
// /proc/self/task/*/schedstat; 0 where the kernel lacks schedstats).
func runQueueWait() time.Duration {
	tasks, _ := os.ReadDir("/proc/self/task")
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			total += time.Duration(n)
		}
	}
	return total
}

// sessionMemory holds n sessions of rt, each having run one small eval
// (a variable set, so each VM holds state of its own), and returns the
// private memory (procmem.Private, bytes) the process had before and
// with them held, as the idle-VM row measures VMs: sessions opened first,
// unmeasured, take the freed memories the engine keeps for reuse.
func sessionMemory(ctx context.Context, rt *glovebox.Runtime, n int) (before, after int64, err error) {
	var held []*glovebox.Session
	defer func() {
		for _, s := range held {
			s.Close()
		}
	}()
	for i := range engine.KeptMemories() + n {
		if i == engine.KeptMemories() {
			before = procmem.Private()
		}
		s, err := rt.NewSession()
		if err != nil {
			return 0, 0, err
		}
		held = append(held, s)
		res, err := s.Eval(ctx, fmt.Sprintf("x = %d", i))
		if err != nil {
			return 0, 0, err
		}
		if res.Status != glovebox.StatusOK {
			return 0, 0, fmt.Errorf("a session's eval ended %s: %+v", res.Status, res.Error)
		}
	}
	return before, procmem.Private(), nil
}
