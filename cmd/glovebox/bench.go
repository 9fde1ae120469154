package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gloveboxhq/glovebox/internal/procmem"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
)

func benchCmd() *cobra.Command {
	var samples, states int
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure glovebox on this machine, each figure beside a baseline from the same run",
		Long: `Measure glovebox on this machine. Every row prints a median (and p99 where
latency matters) next to a baseline measured in the same run, so a noisy
machine still yields a ratio. The first run may also compile other copies
of the guest (evals use the one without fuel metering unless they set a
fuel budget; the fuel rows need both, and one metered by wasmtime's own
fuel for comparison), about a minute each, once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd.Context(), os.Stdout, samples, states)
		},
	}
	cmd.Flags().IntVar(&samples, "samples", 300, "evals per latency figure")
	cmd.Flags().IntVar(&states, "states", 2000, "suspended sessions written to a directory for the resume-at-random row (the issue's figure is for 100000: several minutes)")
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

func runBench(ctx context.Context, w io.Writer, samples, states int) error {
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
	eng, err := openEngine(ctx, cacheDir, false)
	if err != nil {
		return err
	}
	if err := benchSuspend(ctx, samples, states, row, yes); err != nil { // suspend and resume (bench_suspend.go)
		return err
	}
	if err := benchVM(ctx, samples, row); err != nil { // fresh VMs, pool, workers, process start (bench_vm.go)
		return err
	}

	// Host function round trip, fuel and code mode (bench_call.go).
	if err := benchCalls(ctx, row, yes, eng, cacheDir); err != nil {
		return err
	}

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
	benchExecutor(ctx, row)
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
