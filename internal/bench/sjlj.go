package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
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

// benchSjlj adds the setjmp rows: 100k Array#<=> (a setjmp each) against
// the same loop over Integer#<=> (no setjmp) from the same run, and the
// Array#<=> loop 200 levels deep against the shallow one. ruby.wasm's
// Asyncify setjmp copied the whole wasm stack at each setjmp, so its cost
// grew with the depth; after glovebox's rewrite (internal/wasmbin,
// PatchSjlj) it copies one frame.
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
	arr, num, deep := `gb_cmp([1, 2, 3], [1, 2, 4])`, `gb_cmp(1, 2)`, `gb_cmp([1, 2, 3], [1, 2, 4])`
	var a, i, d []time.Duration
	for range rounds { // interleaved
		for _, c := range []struct {
			dst   *[]time.Duration
			code  string
			depth int
		}{{&a, arr, 0}, {&i, num, 0}, {&d, deep, 200}} {
			t, err := run(sjljLoop(c.code, c.depth, n))
			if err != nil {
				return err
			}
			*c.dst = append(*c.dst, t)
		}
	}
	as, is, ds := summarize(a), summarize(i), summarize(d)
	row("-", fmt.Sprintf("%dk Array#<=> (a setjmp each; median of %d)", n/1000, rounds), ms(as.p50), "Integer#<=> loop "+ms(is.p50),
		fmt.Sprintf("%.1fx", float64(as.p50)/float64(is.p50)), "-")
	ratio := float64(ds.p50) / float64(as.p50)
	met := "NO"
	if ratio <= 1.5 {
		met = "yes"
	}
	row(met, fmt.Sprintf("same, 200 Ruby+C levels deep (median of %d)", rounds), ms(ds.p50), "at depth 0 "+ms(as.p50),
		fmt.Sprintf("%.2fx", ratio), "≤ 1.5x (cost independent of depth)")
	return nil
}
