package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// benchPy is the small script of the box rows: start CPython, do a little
// work, print.
const benchPy = "print(sum(i*i for i in range(10000)))"

// benchBoxes adds one pair of rows per OS box that runs here: `true` and
// a small Python script, start to result (median of 7), each beside the
// same command spawned as a plain host process in the same run.
func benchBoxes(ctx context.Context, row func(met string, cols ...string)) {
	median := func(n int, f func() error) (time.Duration, error) {
		var d []time.Duration
		for range n {
			start := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			d = append(d, time.Since(start))
		}
		return summarize(d).p50, nil
	}
	plain := func(argv ...string) (time.Duration, error) {
		return median(7, func() error { return spawn.Run(exec.CommandContext(ctx, argv[0], argv[1:]...)) })
	}
	spawnTrue, err1 := plain("true")
	// The boxes' PATH, not the caller's (a version manager's shim on the
	// caller's PATH would make the baseline slower than the box).
	py := "/usr/bin/python3"
	for _, d := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		if _, err := os.Stat(d + "/python3"); err == nil {
			py = d + "/python3"
			break
		}
	}
	spawnPy, err2 := plain(py, "-c", benchPy)
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "box rows skipped: plain spawn failed: %v %v\n", err1, err2)
		return
	}
	boxes := []struct {
		name string
		make func() (box.Box, error)
	}{
		{"bwrap", func() (box.Box, error) { return bwrap.New(bwrap.Config{}) }},
		{"gvisor", func() (box.Box, error) { return gvisor.New(gvisor.Config{}) }},
	}
	for _, bx := range boxes {
		b, err := bx.make()
		if err != nil {
			row("-", bx.name+": `true`, start to result", "not available", err.Error(), "-", "-")
			continue
		}
		for _, c := range []struct {
			what string
			argv []string
			base time.Duration
		}{
			{"`true`", []string{"true"}, spawnTrue},
			{"python3 script", []string{"python3", "-c", benchPy}, spawnPy},
		} {
			d, err := median(7, func() error {
				res, err := b.Run(ctx, box.Command{Argv: c.argv})
				if err == nil && !res.OK() {
					err = fmt.Errorf("exit %d: %s", res.ExitStatus, res.Stderr)
				}
				return err
			})
			fig := fmt.Sprintf("%s: %s, start to result (median of 7)", bx.name, c.what)
			if err != nil {
				row("NO", fig, "failed", err.Error(), "-", "-")
				continue
			}
			row("-", fig, ms(d), "plain spawn "+ms(c.base), fmt.Sprintf("%.1fx", float64(d)/float64(c.base)), "-")
		}
	}
}
