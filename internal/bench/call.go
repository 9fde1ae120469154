package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// benchCalls adds the rows of the guest's hot paths: a host function
// round trip (beside an empty Ruby method call in the same VM and a Go
// function call), the 1M-iteration loop with and without fuel metering
// (beside native ruby), and one realistic code-mode program over SQLite
// (beside the same work done directly in Go). eng is the engine the
// default Runtime uses.
func benchCalls(ctx context.Context, row func(met string, cols ...string), yes func(bool) string, eng *engine.Engine, cacheDir string) error {
	if err := benchRoundTrip(ctx, row, yes); err != nil {
		return err
	}
	if err := benchLoop(ctx, row, yes, eng, cacheDir); err != nil {
		return err
	}
	return benchCodeMode(ctx, row, yes)
}

// roundTripRounds is how many evals the round-trip figures take the
// median of; each times callsPerRound calls inside the guest.
const (
	roundTripRounds = 15
	callsPerRound   = 5000
)

// benchRoundTrip times add(1, 2), a tool taking two Integers, and ping,
// one taking none, each in a guest loop with the loop's own cost taken
// off, beside an empty Ruby method of two arguments in the same VM and a
// plain Go call of the same function. Each figure is given twice: wall
// time read by the guest's clock, and the process's CPU time (user and
// system, getrusage) per call, which other processes on a shared machine
// inflate far less. The Runtime has no pool, so nothing else runs.
func benchRoundTrip(ctx context.Context, row func(met string, cols ...string), yes func(bool) string) error {
	add := func(a, b int) int { return a + b }
	var tools glovebox.Toolset
	tools.Func("add", add)
	tools.Func("ping", func() int { return 1 })
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &tools, PoolSize: -1, Limits: glovebox.Limits{ToolCalls: 1 << 30}})
	if err != nil {
		return err
	}
	defer rt.Close()
	// One eval per segment, each timed inside the guest and in CPU time.
	loop := func(body string) string {
		return fmt.Sprintf(`def __empty(a, b) = nil
t = Process.clock_gettime(Process::CLOCK_MONOTONIC); i = 0; while i < %d; %s; i += 1; end
Process.clock_gettime(Process::CLOCK_MONOTONIC) - t`, callsPerRound, body)
	}
	segments := []string{loop("add(1, 2)"), loop("ping"), loop("__empty(1, 2)"), loop("nil")}
	wall := make([][]time.Duration, len(segments))
	cpu := make([][]time.Duration, len(segments))
	for range roundTripRounds {
		for i, code := range segments {
			before := cpuTime()
			res, err := rt.Eval(ctx, code)
			used := cpuTime() - before
			if err != nil {
				return err
			}
			if res.Status != glovebox.StatusOK {
				return fmt.Errorf("round-trip program ended %s: %+v", res.Status, res.Error)
			}
			f, _ := res.Value.(float64)
			wall[i], cpu[i] = append(wall[i], time.Duration(f*float64(time.Second))), append(cpu[i], used)
		}
	}
	// Per call: the segment's median less the bare loop's, over the calls.
	per := func(d [][]time.Duration, i int) time.Duration {
		return max(summarize(d[i]).p50-summarize(d[3]).p50, 0) / callsPerRound
	}
	// A Go call of the same function through a func value (not inlined).
	benchSink = add
	var sink int
	const goCalls = 10_000_000
	start := time.Now()
	for i := range goCalls {
		sink += benchSink(i, 2)
	}
	goCall := time.Since(start) / goCalls
	_ = sink
	ns := func(d time.Duration) string { return strconv.FormatInt(d.Nanoseconds(), 10) + " ns" }
	emptyW, emptyC := per(wall, 2), per(cpu, 2)
	for i, name := range []string{"add(1, 2)", "ping, no arguments"} {
		w, c := per(wall, i), per(cpu, i)
		base := "empty Ruby method call " + ns(emptyW) + " wall / " + ns(emptyC) + " CPU"
		if i == 0 {
			base += "; Go call " + strconv.FormatFloat(float64(goCall.Nanoseconds()), 'f', 1, 64) + " ns"
		}
		row(yes(min(w, c) <= 5*time.Microsecond), fmt.Sprintf("host function round trip %s, wall / CPU (median of %d×%d)", name, roundTripRounds, callsPerRound),
			us(w)+" / "+us(c), base, fmt.Sprintf("%.0fx an empty method (CPU)", float64(c)/float64(max(emptyC, 1))), "≤ 5 µs")
	}
	return nil
}

// benchSink is the Go function the round-trip baseline calls, kept in a
// variable so the compiler cannot inline it away.
var benchSink func(a, b int) int

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopRounds is how many interleaved rounds the loop figures take the
// median of.
const loopRounds = 15

// benchLoop times the 1M-iteration while loop inside the guest on the
// engine with fuel metering (used when an eval has a fuel budget), on the
// one without (used otherwise) and on one metered by wasmtime's own fuel
// (glovebox's former way, for comparison), alternating, then in native
// ruby.
func benchLoop(ctx context.Context, row func(met string, cols ...string), yes func(bool) string, eng *engine.Engine, cacheDir string) error {
	const loop = `t = Process.clock_gettime(Process::CLOCK_MONOTONIC); i = 0; while i < 1_000_000; i += 1; end; Process.clock_gettime(Process::CLOCK_MONOTONIC) - t`
	noFuel, err := openEngine(ctx, cacheDir, true)
	if err != nil {
		return err
	}
	defer noFuel.Close()
	wasmtimeFuel, err := openWasmtimeFuelEngine(ctx, cacheDir)
	if err != nil {
		return err
	}
	defer wasmtimeFuel.Close()
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
	// Metered and unmetered runs alternate, so drift in the machine's
	// speed hits all sides alike; the budget is far above what the loop
	// needs, so metering is all that differs.
	metered := benchLimits
	metered.Fuel = 1 << 40
	var on, off, wt, native []time.Duration
	for range loopRounds {
		d, err := guestSeconds(eng.Eval(ctx, &engine.Request{Code: loop, Limits: metered}))
		if err != nil {
			return err
		}
		on = append(on, d)
		if d, err = guestSeconds(noFuel.Eval(ctx, &engine.Request{Code: loop, Limits: benchLimits})); err != nil {
			return err
		}
		off = append(off, d)
		if d, err = guestSeconds(wasmtimeFuel.Eval(ctx, &engine.Request{Code: loop, Limits: metered})); err != nil {
			return err
		}
		wt = append(wt, d)
	}
	// Native runs come after, not interleaved: starting a process between
	// guest runs was seen to slow the next guest run by up to 2x here.
	ruby, rubyErr := exec.LookPath("ruby")
	for i := 0; rubyErr == nil && i < loopRounds; i++ {
		out, err := spawn.Output(exec.CommandContext(ctx, ruby, "-e", "p(begin; "+loop+"; end)"))
		if err != nil {
			return err
		}
		s, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			return err
		}
		native = append(native, time.Duration(s*float64(time.Second)))
	}
	onS, offS, wtS := summarize(on), summarize(off), summarize(wt)
	title := fmt.Sprintf("1M-iteration while loop, no fuel budget (median of %d)", loopRounds)
	if rubyErr == nil {
		nat := summarize(native)
		ver, _ := spawn.Output(exec.Command(ruby, "-e", "print RUBY_VERSION"))
		row(yes(offS.p50 <= 10*nat.p50), title, ms(offS.p50), "native ruby "+string(ver)+" "+ms(nat.p50),
			fmt.Sprintf("%.1fx native", float64(offS.p50)/float64(nat.p50)), "≤ 10x")
	} else {
		row("?", title, ms(offS.p50), "native ruby: not on PATH", "-", "≤ 10x")
	}
	// The overhead is the median of the per-round ratios: each round's
	// runs are next to each other in time, so load that comes and goes
	// hits all of them (the ratio of the medians is also shown).
	overhead := func(x []time.Duration) float64 {
		ratios := make([]float64, len(x))
		for i := range x {
			ratios[i] = float64(x[i]) / float64(off[i])
		}
		slices.Sort(ratios)
		return ratios[len(ratios)/2]
	}
	ovOn, ovWt := overhead(on), overhead(wt)
	row(yes(ovOn <= 1.15), fmt.Sprintf("same loop with a fuel budget (glovebox's metering; median of %d, interleaved)", loopRounds),
		ms(onS.p50), "no budget (unmetered) "+ms(offS.p50),
		fmt.Sprintf("%+.1f%% per round (medians: %+.1f%%)", 100*(ovOn-1), 100*(float64(onS.p50)/float64(offS.p50)-1)), "≤ +15%")
	row("-", "same loop metered by wasmtime's fuel instead (the former way)",
		ms(wtS.p50), "no budget (unmetered) "+ms(offS.p50),
		fmt.Sprintf("%+.1f%% per round (medians: %+.1f%%)", 100*(ovWt-1), 100*(float64(wtS.p50)/float64(offS.p50)-1)), "-")
	return nil
}

// openWasmtimeFuelEngine opens the engine metered by wasmtime's own fuel
// (engine.Config.WasmtimeFuel), compiling it on first use.
func openWasmtimeFuelEngine(ctx context.Context, cacheDir string) (*engine.Engine, error) {
	img, err := image.Path(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	return engine.Open(ctx, engine.Config{ImagePath: img, CacheDir: filepath.Join(cacheDir, "engine"), WasmtimeFuel: true,
		Progress: func(step string) func() { return progress(step + ", metered by wasmtime's fuel (for comparison)") }})
}

// codeModeProgram is what a model writes for "how am I doing this year,
// and what was in my last order?": three tool calls over SQLite and some
// filtering.
const codeModeProgram = `me = profile
recent = orders(year: 2026).reject { |o| %w[cancelled refunded].include?(o["status"]) }
items = recent.empty? ? [] : order_items(recent.first["id"])
{ "name" => me["name"], "plan" => me["plan"], "orders" => recent.size,
  "spent" => recent.sum { |o| o["total"] }.round(2),
  "last_order" => items.map { |i| "#{i["quantity"]} × #{i["name"]}" } }`

// codeModeRounds is how many times the code-mode program runs.
const codeModeRounds = 200

// benchCodeMode runs codeModeProgram end to end through codemode (the
// model's JSON input in, the JSON it reads out) on the support-desk
// example's SQLite database, beside the same three queries and filtering
// written in Go against the same tools.
func benchCodeMode(ctx context.Context, row func(met string, cols ...string), yes func(bool) string) error {
	db, done, err := benchDesk(ctx) // dataflow.go
	if err != nil {
		return err
	}
	defer done()
	dt := desk.NewTools(db)
	var tools glovebox.Toolset
	// Unlabelled, as this row was measured before the data-flow policy:
	// its cost has rows of its own (dataflow.go).
	if err := dt.RegisterUnlabelled(&tools); err != nil {
		return err
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &tools, Hooks: glovebox.Hooks{SanitizeError: desk.SanitizeError}})
	if err != nil {
		return err
	}
	defer rt.Close()
	tool, err := codemode.New(codemode.Config{Runtime: rt})
	if err != nil {
		return err
	}
	input, _ := json.Marshal(map[string]string{"code": codeModeProgram})
	cctx := desk.WithCustomer(ctx, desk.DemoCustomer)
	var d []time.Duration
	for i := range codeModeRounds + 10 {
		start := time.Now()
		out, err := tool.Handle(cctx, input)
		if err != nil {
			return err
		}
		if out.IsError || len(out.Result.ToolCalls) != 3 {
			return fmt.Errorf("code-mode program: %s", out.Output)
		}
		if i >= 10 { // the first runs warm the pool and SQLite's cache
			d = append(d, time.Since(start))
		}
	}
	// The same work in Go: the three tool methods, the filter and the
	// JSON the model would read.
	var g []time.Duration
	for range codeModeRounds {
		start := time.Now()
		if err := codeModeInGo(cctx, dt); err != nil {
			return err
		}
		g = append(g, time.Since(start))
	}
	s, gs := summarize(d), summarize(g)
	row(yes(s.p50 <= 5*time.Millisecond), fmt.Sprintf("code-mode support-desk program, 3 tool calls over SQLite (p50 / p99 of %d)", codeModeRounds),
		ms(s.p50)+" / "+ms(s.p99), "same work in Go "+ms(gs.p50)+" / "+ms(gs.p99),
		fmt.Sprintf("+%s", ms(s.p50-gs.p50)), "-")
	return nil
}

func codeModeInGo(ctx context.Context, t *desk.Tools) error {
	me, err := t.Profile(ctx)
	if err != nil {
		return err
	}
	all, err := t.Orders(ctx, map[string]any{"year": int64(2026)})
	if err != nil {
		return err
	}
	var recent []desk.Order
	spent := 0.0
	for _, o := range all {
		if o.Status != "cancelled" && o.Status != "refunded" {
			recent = append(recent, o)
			spent += o.Total
		}
	}
	var last []string
	if len(recent) > 0 {
		items, err := t.OrderItems(ctx, recent[0].ID)
		if err != nil {
			return err
		}
		for _, i := range items {
			last = append(last, fmt.Sprintf("%d × %s", i.Quantity, i.Name))
		}
	}
	_, err = json.Marshal(map[string]any{"name": me.Name, "plan": me.Plan, "orders": len(recent), "spent": spent, "last_order": last})
	return err
}
