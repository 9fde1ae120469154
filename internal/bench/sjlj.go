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

// sjljProgram times the setjmp rows' loops inside the guest and returns
// their seconds as an Array of Floats, in the order of sjljLoops: n
// iterations of each, run in interleaved chunks of chunk iterations (a
// chunk of each loop in turn, n/chunk times), so that load coming and
// going on a shared machine hits every loop alike and their ratios hold.
// Array#<=> goes through rb_exec_recursive_paired, one setjmp per call;
// Integer#<=> none. The deep loop runs its chunks in a method 200
// Ruby-and-C frames deep (each level a block yielded from C, so the
// frames are on the wasm stack); reaching that depth is not timed.
func sjljProgram(n, chunk int) string {
	var defs, calls strings.Builder
	for k, l := range sjljLoops {
		fmt.Fprintf(&defs, `def gb_loop%d(a, b, n)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  i = 0
  while i < n; %s; i += 1; end
  Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
end
`, k, l.stmt)
		call := fmt.Sprintf("gb_loop%d(%s, %d)", k, l.args, chunk)
		if l.depth > 0 {
			call = fmt.Sprintf("gb_deep(%d) { %s }", l.depth, call)
		}
		fmt.Fprintf(&calls, "  gb_t[%d] += %s\n", k, call)
	}
	return defs.String() + `def gb_deep(d, &blk) = d == 0 ? blk.call : [1].each { return gb_deep(d - 1, &blk) }
gb_t = [0.0] * ` + strconv.Itoa(len(sjljLoops)) + `
` + strconv.Itoa(n/chunk) + `.times do
` + calls.String() + `end
gb_t
`
}

// sjljLoops are the loops sjljProgram times, in the order of its result.
var sjljLoops = []struct {
	stmt, args string
	depth      int
}{
	{"a <=> b", "[1, 2, 3], [1, 2, 4]", 0},   // Array#<=>: a setjmp each
	{"a <=> b", "1, 2", 0},                   // Integer#<=>: none
	{"a <=> b", "[1, 2, 3], [1, 2, 4]", 200}, // Array#<=>, 200 levels deep
	// raise/rescue unwinds with a longjmp to the rescuing frame's tag
	// (and builds an exception and its backtrace, as native Ruby does);
	// throw/catch pushes a tag (a setjmp) and throws to it (a longjmp);
	// the plain loop is their baseline.
	{"begin; raise StandardError; rescue StandardError; end", "nil, nil", 0},
	{"catch(:gb) { throw :gb }", "nil, nil", 0},
	{"nil", "nil, nil", 0},
}

// sjljChunk is how many iterations a chunk of sjljProgram runs.
const sjljChunk = 1000

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
	code := sjljProgram(n, min(n, sjljChunk))
	times := make([][]time.Duration, len(sjljLoops))
	for range rounds {
		out, err := eng.Eval(ctx, &engine.Request{Code: code, Limits: benchLimits})
		if err != nil {
			return err
		}
		if out.Status != engine.StatusOK {
			return fmt.Errorf("setjmp bench ended %s: %+v", out.Status, out.Error)
		}
		v, _ := out.Value.([]any)
		if len(v) != len(sjljLoops) {
			return fmt.Errorf("setjmp bench returned %v", out.Value)
		}
		for k, x := range v {
			f, _ := x.(float64)
			times[k] = append(times[k], time.Duration(f*float64(time.Second)))
		}
	}
	med := make([]time.Duration, len(sjljLoops))
	for k := range times {
		med[k] = summarize(times[k]).p50
	}
	a, i, d, rs, th, pl := med[0], med[1], med[2], med[3], med[4], med[5]
	// Native ruby after the guest's rounds, not between them (see
	// benchLoop).
	nat, ver, natErr := nativeLoops(ctx, code, rounds/2+1)
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

// nativeLoops runs sjljProgram's code in native ruby, rounds times in one
// process, and returns each loop's median and ruby's version. Errors:
// ruby is not on PATH, or the program fails.
func nativeLoops(ctx context.Context, code string, rounds int) ([]time.Duration, string, error) {
	ruby, err := exec.LookPath("ruby")
	if err != nil {
		return nil, "", errors.New("ruby is not on PATH")
	}
	ver, _ := spawn.Output(exec.CommandContext(ctx, ruby, "-e", "print RUBY_VERSION"))
	b, err := spawn.Output(exec.CommandContext(ctx, ruby, "--disable-gems", "-e",
		fmt.Sprintf("gb_run = -> { %s }\n%d.times { puts gb_run.call.join(\" \") }", code, rounds)))
	if err != nil {
		return nil, "", fmt.Errorf("native ruby: %w", err)
	}
	times := make([][]time.Duration, len(sjljLoops))
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != len(sjljLoops) {
			return nil, "", fmt.Errorf("native ruby printed %q", l)
		}
		for k, x := range f {
			secs, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return nil, "", fmt.Errorf("native ruby printed %q", l)
			}
			times[k] = append(times[k], time.Duration(secs*float64(time.Second)))
		}
	}
	out := make([]time.Duration, len(sjljLoops))
	for k := range times {
		out[k] = summarize(times[k]).p50
	}
	return out, string(ver), nil
}
