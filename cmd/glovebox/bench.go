package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox/internal/bench"
)

// benchCmd is `glovebox bench`: its flags and the printed table. The rows
// are measured in internal/bench, one file per group of rows there; a new
// row is a function in a file of its own in internal/bench, called from
// bench.Run (see that package's doc), and needs nothing here.
func benchCmd() *cobra.Command {
	var samples, states int
	var only []string
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
			for _, g := range only {
				if !slices.Contains(bench.Groups, g) {
					return fmt.Errorf("--only %s: no such group of rows (groups: %s)", g, strings.Join(bench.Groups, ", "))
				}
			}
			return runBench(cmd.Context(), os.Stdout, samples, states, only...)
		},
	}
	cmd.Flags().IntVar(&samples, "samples", 300, "evals per latency figure")
	cmd.Flags().IntVar(&states, "states", 2000, "suspended sessions written to a directory for the resume-at-random row (the issue's figure is for 100000: several minutes)")
	cmd.Flags().StringSliceVar(&only, "only", nil, "measure only these groups of rows (comma-separated: "+strings.Join(bench.Groups, ", ")+"); all when not given")
	return cmd
}

// runBench prints the header, then every row bench.Run measures as one
// aligned table (each also reported on stderr as it is measured); the
// last column says whether the target is met.
func runBench(ctx context.Context, w io.Writer, samples, states int, only ...string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	fmt.Fprintf(w, "glovebox bench — %s, %d CPUs, %s, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"),
		runtime.NumCPU(), kernel(), runtime.Version())
	var rows [][]string
	row := func(met string, cols ...string) {
		fmt.Fprintf(os.Stderr, "measured: %s\n", strings.Join(cols[:2], ": "))
		rows = append(rows, append(cols, met))
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
	return bench.Run(ctx, bench.Config{Samples: samples, Progress: progress, Only: only, States: states}, row)
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(b))
}
