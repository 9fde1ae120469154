// Package bench is the measuring machinery behind `glovebox bench`: each
// figure is measured beside a baseline from the same run, so a noisy
// machine still yields a ratio. The CLI only prints what [Run] reports.
//
// Where rows live: one file per group of rows (vm.go: fresh VMs, the
// pool, workers and process start; call.go: host calls, fuel and code
// mode; sjlj.go: setjmp/longjmp; mcp.go: MCP round trips; box.go: the
// OS boxes; executor.go: the executor under load), each a function taking a [Row] that Run calls in
// turn. To add a row, write a function func(ctx, row Row) error in a file
// of its own here and call it from Run.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
	"github.com/gloveboxhq/glovebox/internal/procmem"
)

// Row reports one measured figure: met is "yes", "NO", "-" (no target)
// or "?" (not judged here); cols are the figure's name, its result, the
// baseline measured in the same run, the ratio and the target, in that
// order (five strings).
type Row = func(met string, cols ...string)

// Config is one bench run. Its zero value measures with Samples 300, the
// running executable as the glovebox binary and no progress report.
type Config struct {
	// Samples is how many evals each latency figure takes; zero means 300.
	Samples int
	// Glovebox is the path of the glovebox binary whose start the
	// process-start row times (`glovebox eval -e 1+1`); empty means
	// os.Executable().
	Glovebox string
	// Progress reports slow first-run steps (compiling a guest copy):
	// called with the step's name, it returns the function called when the
	// step is done. nil reports nothing.
	Progress func(step string) func()
	// Only names the groups of rows to measure (see Groups); empty
	// measures all.
	Only []string
	// States is how many suspended sessions the resume-at-random row
	// writes to a directory; zero means 2000 (the figure is for
	// 100,000: several minutes).
	States int
}

// progress is the running Run's Config.Progress (Run is not meant to run
// twice at once: the figures would measure each other).
var progress = func(string) func() { return func() {} }

// Run measures every row in turn, calling row for each as it is
// measured. It returns the first error that stops the measuring (the
// Ruby image missing, an engine that does not open); a row that could not
// be measured is reported as a row saying so instead.
func Run(ctx context.Context, cfg Config, row Row) error {
	if cfg.Samples <= 0 {
		cfg.Samples = 300
	}
	if cfg.Progress != nil {
		progress = cfg.Progress
	}
	if cfg.Glovebox == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.Glovebox = self
	}
	cacheDir, err := glovebox.DefaultCacheDir()
	if err != nil {
		return err
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Progress: progress})
	if err != nil {
		return err
	}
	defer rt.Close()
	eng, err := openEngine(ctx, cacheDir, false)
	if err != nil {
		return err
	}
	want := func(g string) bool { return len(cfg.Only) == 0 || slices.Contains(cfg.Only, g) }
	if cfg.States <= 0 {
		cfg.States = 2000
	}
	if want("suspend") {
		if err := benchSuspend(ctx, cfg.Samples, cfg.States, row, yes); err != nil { // suspend and resume (suspend.go)
			return err
		}
	}
	if want("vm") {
		if err := benchVM(ctx, cfg.Samples, cfg.Glovebox, row); err != nil { // fresh VMs, pool, workers, process start (vm.go)
			return err
		}
	}
	// Host function round trip, fuel and code mode (call.go).
	if want("calls") {
		if err := benchCalls(ctx, row, yes, eng, cacheDir); err != nil {
			return err
		}
	}
	if want("dataflow") {
		if err := benchDataflow(ctx, row, yes); err != nil { // labels (dataflow.go)
			return err
		}
	}
	if want("memory") {
		if err := benchMemory(ctx, rt, eng, row); err != nil {
			return err
		}
	}
	if want("sjlj") {
		if err := benchSjlj(ctx, eng, row); err != nil { // setjmp/longjmp (sjlj.go)
			return err
		}
	}
	if want("mcp") {
		if err := benchMCP(ctx, cfg.Samples, row); err != nil { // run_ruby and approval round trips over MCP (mcp.go)
			return err
		}
	}
	eng.Close()
	if want("boxes") {
		benchBoxes(ctx, row) // the OS-level boxes (box.go)
	}
	if want("executor") {
		Executor(ctx, row)      // the executor under load (executor.go)
		ExecutorFleet(ctx, row) // a session moving between two executors (fleet.go)
	}
	return nil
}

// Groups are the names of the groups of rows Config.Only selects.
var Groups = []string{"suspend", "vm", "calls", "dataflow", "memory", "sjlj", "mcp", "boxes", "executor"}

// benchMemory measures the private memory per idle VM and per idle
// session.
func benchMemory(ctx context.Context, rt *glovebox.Runtime, eng *engine.Engine, row Row) error {
	// Private memory per idle, prepared VM. VMs held first, unmeasured,
	// take the freed memories the engine keeps for reuse (their pages
	// counted already), so that every measured VM maps its own.
	const idle = 50
	drainRelease, err := eng.HoldIdle(engine.KeptMemories())
	if err != nil {
		return err
	}
	before := procmem.Private()
	release, err := eng.HoldIdle(idle)
	if err != nil {
		drainRelease()
		return err
	}
	after := procmem.Private()
	release()
	drainRelease()
	perVM := float64(after-before) / idle
	row(yes(perVM <= 1e6), fmt.Sprintf("private memory per idle VM (%d held)", idle), fmt.Sprintf("%.2f MB", float64(after-before)/idle/1e6),
		fmt.Sprintf("process before %.0f MB", float64(before)/1e6), "-", "≤ 1 MB")
	// Private memory per idle session: a VM kept with its state after an
	// eval, on the default Runtime (sessions per machine is what a
	// platform sells).
	const sessions = 50
	sb, sa, err := sessionMemory(ctx, rt, sessions)
	if err != nil {
		return err
	}
	perSess := float64(sa-sb) / sessions
	row(yes(perSess <= 5e6), fmt.Sprintf("private memory per idle session (%d held, one eval each)", sessions), fmt.Sprintf("%.2f MB", perSess/1e6),
		fmt.Sprintf("process before %.0f MB", float64(sb)/1e6), "-", "≤ 5 MB")
	return nil
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

// yes is a row's MET column for a judged target.
func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
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
