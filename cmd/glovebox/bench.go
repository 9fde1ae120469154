package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gloveboxhq/glovebox/internal/procmem"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
)

func benchCmd() *cobra.Command {
	var samples int
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure glovebox on this machine, each figure beside a baseline from the same run",
		Long: `Measure glovebox on this machine. Every row prints a median (and p99 where
latency matters) next to a baseline measured in the same run, so a noisy
machine still yields a ratio. The first run also compiles a second copy of
the guest without fuel metering (for the fuel row), about a minute.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd.Context(), os.Stdout, samples)
		},
	}
	cmd.Flags().IntVar(&samples, "samples", 300, "evals per latency figure")
	return cmd
}

type stat struct {
	p50, p99 time.Duration
	n        int
}

func summarize(d []time.Duration) stat {
	slices.Sort(d)
	if len(d) == 0 {
		return stat{}
	}
	return stat{p50: d[len(d)/2], p99: d[min(len(d)-1, len(d)*99/100)], n: len(d)}
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) + " ms"
}
func us(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Nanoseconds())/1000, 'f', 1, 64) + " µs"
}

func runBench(ctx context.Context, w io.Writer, samples int) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cacheDir, err := glovebox.DefaultCacheDir()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "glovebox bench — %s, %d CPUs, %s, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"),
		runtime.NumCPU(), kernel(), runtime.Version())
	// Rows are reported on stderr as they are measured, then printed as
	// one aligned table; the last column says whether the target is met.
	var rows [][]string
	row := func(met string, cols ...string) {
		fmt.Fprintf(os.Stderr, "measured: %s\n", strings.Join(cols[:2], ": "))
		rows = append(rows, append(cols, met))
	}
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "NO"
	}
	defer func() {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FIGURE\tRESULT\tBASELINE (same run)\tRATIO\tTARGET\tMET")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		tw.Flush()
		fmt.Fprintln(w, "\nlatency = wall time of Runtime.Eval; loop = time measured inside the guest; memory = Private_Clean+Private_Dirty from /proc/self/smaps_rollup.")
	}()

	rt, err := glovebox.New(ctx, glovebox.Config{Progress: progress})
	if err != nil {
		return err
	}
	defer rt.Close()
	evalOK := func(r *glovebox.Runtime, code string) (*glovebox.Result, error) {
		res, err := r.Eval(ctx, code)
		if err == nil && res.Status != glovebox.StatusOK {
			err = fmt.Errorf("%q ended %s: %+v", code, res.Status, res.Error)
		}
		return res, err
	}
	timeEvals := func(r *glovebox.Runtime, n int, pause time.Duration, code string) (stat, error) {
		var d []time.Duration
		for range n {
			if pause > 0 {
				time.Sleep(pause)
			}
			start := time.Now()
			if _, err := evalOK(r, code); err != nil {
				return stat{}, err
			}
			d = append(d, time.Since(start))
		}
		return summarize(d), nil
	}

	// Fresh VM + 1+1, against booting Ruby per eval.
	eng, err := openEngine(ctx, cacheDir, false)
	if err != nil {
		return err
	}
	var boot []time.Duration
	for range 5 {
		start := time.Now()
		out, err := eng.EvalBooted(ctx, &engine.Request{Code: "1+1", Limits: benchLimits})
		if err != nil {
			return err
		}
		if out.Status != engine.StatusOK {
			return fmt.Errorf("booted eval ended %s", out.Status)
		}
		boot = append(boot, time.Since(start))
	}
	bootStat := summarize(boot)
	timeEvals(rt, 50, 5*time.Millisecond, "1+1") // warm up
	warm, err := timeEvals(rt, samples, 10*time.Millisecond, "1+1")
	if err != nil {
		return err
	}
	row(yes(warm.p50 <= time.Millisecond && warm.p99 <= 5*time.Millisecond), "fresh VM + eval 1+1, pool warm (p50 / p99)", ms(warm.p50)+" / "+ms(warm.p99),
		"boot per eval "+ms(bootStat.p50)+" / "+ms(bootStat.p99),
		fmt.Sprintf("%.0fx faster", float64(bootStat.p50)/float64(warm.p50)), "≤ 1 ms / ≤ 5 ms")
	b2b, err := timeEvals(rt, samples, 0, "1+1")
	if err != nil {
		return err
	}
	row("-", "fresh VM + eval 1+1, back-to-back (p50 / p99)", ms(b2b.p50)+" / "+ms(b2b.p99),
		"boot per eval "+ms(bootStat.p50)+" / "+ms(bootStat.p99),
		fmt.Sprintf("%.0fx faster", float64(bootStat.p50)/float64(b2b.p50)), "(pool drained: VM made per eval)")

	// One tool-call round trip, against an empty eval.
	var tools glovebox.Toolset
	tools.Func("ping", func() int { return 1 })
	trt, err := glovebox.New(ctx, glovebox.Config{Tools: &tools, Limits: glovebox.Limits{ToolCalls: 1 << 30}})
	if err != nil {
		return err
	}
	defer trt.Close()
	const calls = 10_000
	var per []time.Duration
	for range 7 {
		with, err := evalOK(trt, fmt.Sprintf("i = 0; while i < %d; ping; i += 1; end", calls))
		if err != nil {
			return err
		}
		without, err := evalOK(trt, fmt.Sprintf("i = 0; while i < %d; i += 1; end", calls))
		if err != nil {
			return err
		}
		per = append(per, (with.Duration-without.Duration)/calls)
	}
	empty, err := timeEvals(trt, 100, 10*time.Millisecond, "nil")
	if err != nil {
		return err
	}
	tool := summarize(per)
	row(yes(tool.p50 <= 10*time.Microsecond), "one tool-call round trip (median of 7×10k)", us(tool.p50), "empty eval "+ms(empty.p50),
		fmt.Sprintf("%.1f%% of an eval", 100*float64(tool.p50)/float64(empty.p50)), "≤ 10 µs")

	// The 1M-iteration loop: sandbox, without fuel, and native ruby.
	// Metered and unmetered runs alternate, so drift in the machine's
	// speed hits both sides alike.
	const loop = `t = Process.clock_gettime(Process::CLOCK_MONOTONIC); i = 0; while i < 1_000_000; i += 1; end; Process.clock_gettime(Process::CLOCK_MONOTONIC) - t`
	noFuel, err := openEngine(ctx, cacheDir, true)
	if err != nil {
		return err
	}
	defer noFuel.Close()
	guestSeconds := func(out *engine.Outcome, err error) (time.Duration, error) {
		if err != nil {
			return 0, err
		}
		if out.Status != engine.StatusOK {
			return 0, fmt.Errorf("loop ended %s", out.Status)
		}
		f, _ := out.Value.(float64)
		return time.Duration(f * float64(time.Second)), nil
	}
	var on, off, native []time.Duration
	for range 11 {
		d, err := guestSeconds(eng.Eval(ctx, &engine.Request{Code: loop, Limits: benchLimits}))
		if err != nil {
			return err
		}
		on = append(on, d)
		if d, err = guestSeconds(noFuel.Eval(ctx, &engine.Request{Code: loop, Limits: benchLimits})); err != nil {
			return err
		}
		off = append(off, d)
	}
	// Native runs come after, not interleaved: starting a process between
	// guest runs was seen to slow the next guest run by up to 2x here.
	ruby, rubyErr := exec.LookPath("ruby")
	for i := 0; rubyErr == nil && i < 11; i++ {
		out, err := exec.CommandContext(ctx, ruby, "-e", "p(begin; "+loop+"; end)").Output()
		if err != nil {
			return err
		}
		s, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			return err
		}
		native = append(native, time.Duration(s*float64(time.Second)))
	}
	onS, offS := summarize(on), summarize(off)
	if rubyErr == nil {
		nat := summarize(native)
		ver, _ := exec.Command(ruby, "-e", "print RUBY_VERSION").Output()
		row(yes(onS.p50 <= 10*nat.p50), "1M-iteration while loop (median of 11)", ms(onS.p50), "native ruby "+string(ver)+" "+ms(nat.p50),
			fmt.Sprintf("%.1fx native", float64(onS.p50)/float64(nat.p50)), "≤ 10x")
	} else {
		row("?", "1M-iteration while loop (median of 11)", ms(onS.p50), "native ruby: not on PATH", "-", "≤ 10x")
	}
	row(yes(float64(onS.p50) <= 1.15*float64(offS.p50)), "same loop, fuel metering on (median of 11)", ms(onS.p50), "fuel off "+ms(offS.p50),
		fmt.Sprintf("%+.1f%%", 100*(float64(onS.p50)/float64(offS.p50)-1)), "≤ +15%")

	// Throughput with 1 and 2 workers (no pool: each worker makes its
	// VMs), alternating 1-second rounds.
	nrt, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1})
	if err != nil {
		return err
	}
	defer nrt.Close()
	rate := func(workers int) (float64, error) {
		var n atomic.Int64
		var firstErr error
		var once sync.Once
		deadline := time.Now().Add(time.Second)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					if _, err := evalOK(nrt, "1+1"); err != nil {
						once.Do(func() { firstErr = err })
						return
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return float64(n.Load()), firstErr
	}
	rate(1) // warm up
	var r1s, r2s []float64
	for range 5 {
		r1, err := rate(1)
		if err != nil {
			return err
		}
		r2, err := rate(2)
		if err != nil {
			return err
		}
		r1s, r2s = append(r1s, r1), append(r2s, r2)
	}
	slices.Sort(r1s)
	slices.Sort(r2s)
	r1, r2 := r1s[len(r1s)/2], r2s[len(r2s)/2]
	row(yes(r2 >= 1.8*r1), "evals/s (fresh VM + 1+1), 2 workers vs 1 (median of 5)", fmt.Sprintf("%.0f/s", r2), fmt.Sprintf("1 worker %.0f/s", r1),
		fmt.Sprintf("%.2fx", r2/r1), "≥ 1.8x")

	// Process start to first result, warm cache, against a bare start.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	procTime := func(args ...string) (stat, error) {
		var d []time.Duration
		for range 11 {
			start := time.Now()
			if out, err := exec.CommandContext(ctx, self, args...).CombinedOutput(); err != nil {
				return stat{}, fmt.Errorf("%s %v: %w: %s", self, args, err, out)
			}
			d = append(d, time.Since(start))
		}
		return summarize(d), nil
	}
	first, err := procTime("eval", "-e", "1+1")
	if err != nil {
		return err
	}
	bare, err := procTime("version")
	if err != nil {
		return err
	}
	row(yes(first.p50 <= 150*time.Millisecond), "process start → first result, warm cache (median of 11)", ms(first.p50), "`glovebox version` "+ms(bare.p50),
		fmt.Sprintf("+%s", ms(first.p50-bare.p50)), "≤ 150 ms")

	// Private memory per idle, prepared VM.
	const idle = 50
	before := procmem.Private()
	release, err := eng.HoldIdle(idle)
	if err != nil {
		return err
	}
	after := procmem.Private()
	release()
	perVM := float64(after-before) / idle
	row(yes(perVM <= 5e6), fmt.Sprintf("private memory per idle VM (%d held)", idle), fmt.Sprintf("%.2f MB", float64(after-before)/idle/1e6),
		fmt.Sprintf("process before %.0f MB", float64(before)/1e6), "-", "≤ 5 MB")
	if err := benchSjlj(ctx, eng, row); err != nil { // setjmp/longjmp (bench_sjlj.go)
		return err
	}
	eng.Close()
	benchBoxes(ctx, row) // the OS-level boxes (bench_box.go)
	return nil
}

var benchLimits = engine.Limits{Timeout: time.Minute, Memory: 1 << 30, Stdout: 1 << 20, Stderr: 1 << 16, Value: 1 << 20}

func openEngine(ctx context.Context, cacheDir string, noFuel bool) (*engine.Engine, error) {
	img, err := image.Path(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	return engine.Open(ctx, engine.Config{ImagePath: img, CacheDir: filepath.Join(cacheDir, "engine"), NoFuel: noFuel,
		Progress: func(step string) func() {
			if noFuel {
				step += ", without fuel metering"
			}
			return progress(step)
		}})
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(b))
}
