package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// The Float rows: on wasm32 CRuby has no flonums, so every Float is a
// heap object that the GC must collect, where native (64-bit) Ruby
// allocates nothing for most Floats. Each row runs a Float-heavy program
// (from the programs suite) and prints the GC time beside the total, per
// iteration, and the ratio to native ruby in the same run.

// floatRow is one Float row: a program of the suite at a size that
// stands for a short eval (one GC at the most with the allowance Ruby
// boots with, see internal/engine's gcEnv), or for a long one.
type floatRow struct {
	file, title, unit string // unit: what one iteration is
	n, iters          int    // bench(n) does iters iterations
}

var floatRows = []floatRow{
	{"nbody.rb", "n-body, 2,000 steps of 5 bodies", "step", 2_000, 2_000},
	{"nbody.rb", "n-body, 20,000 steps", "step", 20_000, 20_000},
	{"matmul.rb", "Float matrix multiply, 60 x 60", "multiply-add", 60, 60 * 60 * 60},
}

// floatReps is how many runs each Float row takes the median of.
const floatReps = 5

// floatTimer defines gb_float_time(n): the seconds bench(n) takes, the GC
// milliseconds and GC runs during it (GC.stat's time and count), and its
// check value, as "seconds gc_ms gc_count value".
const floatTimer = `
def gb_float_time(n)
  g = GC.stat
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  r = bench(n)
  d = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
  h = GC.stat
  format("%.6f %d %d %s", d, h[:time] - g[:time], h[:count] - g[:count], r)
end
`

// gcTiming is one timed run of a Float row.
type gcTiming struct {
	d, gc time.Duration
	gcs   int
	check string
}

func parseGCTiming(s string) (gcTiming, error) {
	f := strings.SplitN(strings.TrimSpace(s), " ", 4)
	if len(f) != 4 {
		return gcTiming{}, fmt.Errorf("unexpected timing %q", s)
	}
	secs, err1 := strconv.ParseFloat(f[0], 64)
	gcms, err2 := strconv.Atoi(f[1])
	n, err3 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return gcTiming{}, fmt.Errorf("unexpected timing %q", s)
	}
	return gcTiming{time.Duration(secs * float64(time.Second)), time.Duration(gcms) * time.Millisecond, n, f[3]}, nil
}

// medianGC is the run of median duration (runs is not empty).
func medianGC(runs []gcTiming) gcTiming {
	ds := make([]time.Duration, len(runs))
	for i, r := range runs {
		ds[i] = r.d
	}
	m := summarize(ds).p50
	for _, r := range runs {
		if r.d == m {
			return r
		}
	}
	return runs[0]
}

// benchFloats adds the Float rows. rt is a Runtime with no fuel budget;
// each glovebox run is a fresh VM, and native ruby's runs (a process
// each) take turns with them, so that load coming and going falls on
// both alike.
func benchFloats(ctx context.Context, rt *glovebox.Runtime, row Row) error {
	ruby, rubyErr := exec.LookPath("ruby")
	for _, fr := range floatRows {
		src, err := programFiles.ReadFile("programs/" + fr.file)
		if err != nil {
			return err
		}
		code := string(src) + floatTimer + fmt.Sprintf("gb_float_time(%d)\n", fr.n)
		var gb, nat []gcTiming
		for range floatReps {
			s, err := evalValue(ctx, rt, fr.file, code)
			if err != nil {
				return err
			}
			t, err := parseGCTiming(s)
			if err != nil {
				return fmt.Errorf("%s: %w", fr.file, err)
			}
			gb = append(gb, t)
			if rubyErr == nil {
				out, err := spawn.Output(exec.CommandContext(ctx, ruby, "--disable-gems", "-e", "puts begin\n"+code+"end\n"))
				if err != nil {
					return fmt.Errorf("native ruby, %s: %w", fr.file, err)
				}
				if t, err = parseGCTiming(string(out)); err != nil {
					return fmt.Errorf("native ruby, %s: %w", fr.file, err)
				}
				nat = append(nat, t)
			}
		}
		g := medianGC(gb)
		per := func(d time.Duration) string { return us(d / time.Duration(fr.iters)) }
		result := fmt.Sprintf("%s (GC %s in %d runs, %.0f%%; a %s %s, GC %s)", ms(g.d), ms(g.gc), g.gcs,
			100*float64(g.gc)/float64(g.d), fr.unit, per(g.d), per(g.gc))
		title := fmt.Sprintf("%s: GC beside the total (median of %d)", fr.title, floatReps)
		if rubyErr != nil {
			row("-", title, result, "native ruby: not on PATH", "-", "-")
			continue
		}
		n := medianGC(nat)
		if n.check != g.check {
			return fmt.Errorf("%s: glovebox answered %q, native ruby %q", fr.file, g.check, n.check)
		}
		row("-", title, result, fmt.Sprintf("native ruby %s (GC %s in %d runs)", ms(n.d), ms(n.gc), n.gcs),
			fmt.Sprintf("%.1fx native", float64(g.d)/float64(n.d)), "-")
	}
	return nil
}
