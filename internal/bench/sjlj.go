package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// sjljLoop times n comparisons inside the guest, called from a method
// `depth` Ruby-and-C frames deep (each level a block yielded from C, so
// the frames are on the wasm stack), and returns the seconds as a Float.
// cmp is the comparison: Array#<=> goes through rb_exec_recursive_paired,
// one setjmp per call; Integer#<=> none.
func sjljLoop(cmp string, depth, n int) string {
	return fmt.Sprintf(`def gb_cmp(a, b)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  i = 0
  while i < %d; a <=> b; i += 1; end
  Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
end
def gb_deep(d, &blk) = d == 0 ? blk.call : [1].each { return gb_deep(d - 1, &blk) }
gb_deep(%d) { %s }`, n, depth, cmp)
}

// loopCode times n runs of stmt inside the guest, in a method called
// `depth` Ruby-and-C frames deep like sjljLoop, and returns the seconds
// as a Float.
func loopCode(stmt string, depth, n int) string {
	return fmt.Sprintf(`def gb_loop
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  i = 0
  while i < %d; %s; i += 1; end
  Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
end
def gb_deep(d, &blk) = d == 0 ? blk.call : [1].each { return gb_deep(d - 1, &blk) }
gb_deep(%d) { gb_loop }`, n, stmt, depth)
}

// The statements of the exception rows: raise/rescue unwinds with a
// longjmp to the rescuing frame's tag (and builds an exception and its
// backtrace, as native Ruby does); throw/catch pushes a tag (a setjmp)
// and throws to it (a longjmp); the plain loop is their baseline.
const (
	stmtRaise = "begin; raise StandardError; rescue StandardError; end"
	stmtThrow = "catch(:gb) { throw :gb }"
	stmtPlain = "nil"
)

// benchSjlj adds the setjmp rows: 100k Array#<=> (a setjmp each) against
// the same loop over Integer#<=> (no setjmp) from the same run, and the
// Array#<=> loop 200 levels deep against the shallow one. ruby.wasm's
// Asyncify setjmp copied the whole wasm stack at each setjmp, so its cost
// grew with the depth; after glovebox's rewrite (internal/wasmbin,
// PatchSjlj) it copies one frame. Then raise/rescue and throw/catch loops
// beside a plain loop, and the same loops in native ruby, whose ratios
// are CRuby's own share of the cost.
func benchSjlj(ctx context.Context, eng *engine.Engine, row func(met string, cols ...string)) error {
	return benchSjljN(ctx, eng, row, 100_000, 11)
}

// benchSjljN is benchSjlj with n comparisons per loop and the median of
// rounds interleaved runs.
func benchSjljN(ctx context.Context, eng *engine.Engine, row func(met string, cols ...string), n, rounds int) error {
	run := func(code string) (time.Duration, error) {
		out, err := eng.Eval(ctx, &engine.Request{Code: code, Limits: benchLimits})
		if err != nil {
			return 0, err
		}
		if out.Status != engine.StatusOK {
			return 0, fmt.Errorf("setjmp bench ended %s: %+v", out.Status, out.Error)
		}
		f, _ := out.Value.(float64)
		return time.Duration(f * float64(time.Second)), nil
	}
	arr, num := `gb_cmp([1, 2, 3], [1, 2, 4])`, `gb_cmp(1, 2)`
	loops := []string{sjljLoop(arr, 0, n), sjljLoop(num, 0, n), sjljLoop(arr, 200, n),
		loopCode(stmtRaise, 0, n), loopCode(stmtThrow, 0, n), loopCode(stmtPlain, 0, n)}
	times := make([][]time.Duration, len(loops))
	for range rounds { // interleaved
		for k, code := range loops {
			t, err := run(code)
			if err != nil {
				return err
			}
			times[k] = append(times[k], t)
		}
	}
	med := make([]time.Duration, len(loops))
	for k := range times {
		med[k] = summarize(times[k]).p50
	}
	a, i, d, rs, th, pl := med[0], med[1], med[2], med[3], med[4], med[5]
	// Native ruby after the guest's rounds, not between them (see
	// benchLoop).
	nat, ver, natErr := nativeLoops(ctx, loops, rounds/2+1)
	vsNative := func(k int) string {
		if natErr != nil {
			return "-"
		}
		return fmt.Sprintf("%.1fx native", float64(med[k])/float64(nat[k]))
	}
	row("-", fmt.Sprintf("%dk Array#<=> (a setjmp each; median of %d)", n/1000, rounds), ms(a), "Integer#<=> loop "+ms(i),
		fmt.Sprintf("%.1fx", float64(a)/float64(i)), "≤ 5x (issue 36)")
	ratio := float64(d) / float64(a)
	met := "NO"
	if ratio <= 1.5 {
		met = "yes"
	}
	row(met, fmt.Sprintf("same, 200 Ruby+C levels deep (median of %d)", rounds), ms(d), "at depth 0 "+ms(a),
		fmt.Sprintf("%.2fx", ratio), "≤ 1.5x (cost independent of depth)")
	row("-", fmt.Sprintf("%dk raise/rescue (a longjmp each; median of %d)", n/1000, rounds), ms(rs), "plain loop "+ms(pl),
		fmt.Sprintf("%.1fx (%s)", float64(rs)/float64(pl), vsNative(3)), "-")
	row("-", fmt.Sprintf("%dk throw/catch (a setjmp and a longjmp each; median of %d)", n/1000, rounds), ms(th), "plain loop "+ms(pl),
		fmt.Sprintf("%.1fx (%s)", float64(th)/float64(pl), vsNative(4)), "-")
	if natErr != nil {
		row("-", "same loops in native ruby", "skipped: "+natErr.Error(), "-", "-", "-")
		return nil
	}
	row("-", fmt.Sprintf("  native ruby %s: %dk Array#<=> (CRuby's own share; median of %d)", ver, n/1000, rounds/2+1), ms(nat[0]),
		"Integer#<=> loop "+ms(nat[1]), fmt.Sprintf("%.1fx", float64(nat[0])/float64(nat[1])), "-")
	row("-", fmt.Sprintf("  native ruby %s: %dk raise/rescue, %dk throw/catch", ver, n/1000, n/1000), ms(nat[3])+", "+ms(nat[4]),
		"plain loop "+ms(nat[5]), fmt.Sprintf("%.1fx, %.1fx", float64(nat[3])/float64(nat[5]), float64(nat[4])/float64(nat[5])), "-")
	return nil
}

// nativeLoops runs each guest loop in native ruby, rounds times in one
// process, and returns the medians and ruby's version. Errors: ruby is
// not on PATH, or a loop fails.
func nativeLoops(ctx context.Context, loops []string, rounds int) ([]time.Duration, string, error) {
	ruby, err := exec.LookPath("ruby")
	if err != nil {
		return nil, "", errors.New("ruby is not on PATH")
	}
	ver, _ := spawn.Output(exec.CommandContext(ctx, ruby, "-e", "print RUBY_VERSION"))
	out := make([]time.Duration, len(loops))
	for k, code := range loops {
		b, err := spawn.Output(exec.CommandContext(ctx, ruby, "--disable-gems", "-e",
			fmt.Sprintf("gb_t = -> { %s }\n%d.times { p gb_t.call }", code, rounds)))
		if err != nil {
			return nil, "", fmt.Errorf("native ruby: %w", err)
		}
		var ds []time.Duration
		for _, l := range strings.Fields(string(b)) {
			f, err := strconv.ParseFloat(l, 64)
			if err != nil {
				return nil, "", fmt.Errorf("native ruby printed %q", l)
			}
			ds = append(ds, time.Duration(f*float64(time.Second)))
		}
		if len(ds) == 0 {
			return nil, "", errors.New("native ruby printed nothing")
		}
		out[k] = summarize(ds).p50
	}
	return out, string(ver), nil
}
