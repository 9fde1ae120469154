package main

import (
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports slow first-run steps on stderr: a spinner with the
// elapsed time on a terminal, one line per step otherwise.
func progress(step string) func() {
	start := time.Now()
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		fmt.Fprintf(os.Stderr, "glovebox: %s...\n", step)
		return func() {
			fmt.Fprintf(os.Stderr, "glovebox: %s: done in %.1fs\n", step, time.Since(start).Seconds())
		}
	}
	bar := progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("glovebox: "+step),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				bar.Add(1)
			case <-stop:
				return
			}
		}
	}()
	return func() {
		close(stop)
		bar.Finish()
		fmt.Fprintf(os.Stderr, "glovebox: %s: done in %.1fs\n", step, time.Since(start).Seconds())
	}
}
