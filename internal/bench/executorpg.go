package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/internal/pgtest"
)

// executorPostgres adds the PostgreSQL rows: `1+1` evals/s through one
// executor on a PostgreSQL store (a real server started for the run,
// internal/pgtest; 2 workers, 4 clients) beside the same evals
// in-process, then through two executors sharing that store (2 workers
// each, 8 clients taking turns between them) beside the one, with the
// ratio of two to one. Both executors and every client share this
// machine's cores (and PostgreSQL's), so two cannot do much more than
// one here. Each figure gives the processor time per eval of this process
// and of the PostgreSQL server's processes.
//
// After the one executor's row come the store's writes per eval on
// PostgreSQL (this process's and the server's processor time) and the
// executor's own cost beyond its parts there, the round trip being sq's
// (measured beside the SQLite rows; nil: not measured).
func executorPostgres(ctx context.Context, row Row, tools *glovebox.Toolset, sq *execFloors) {
	const workers = 2
	pg, err := pgtest.Start()
	if err != nil {
		row("-", "PostgreSQL store rows", "not available", err.Error(), "-", "-")
		return
	}
	defer pg.Stop()
	b, err := bwrap.New(bwrap.Config{})
	if err != nil {
		row("-", "PostgreSQL store rows", "not available", err.Error(), "-", "-")
		return
	}
	var xs []*execServer
	defer func() {
		for _, x := range xs {
			x.done()
		}
	}()
	for range 2 {
		x, err := startExecServer(ctx, "", workers, b, pg.URL)
		if err != nil {
			row("-", "PostgreSQL store rows", "not available", err.Error(), "-", "-")
			return
		}
		xs = append(xs, x)
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: tools, PoolSize: workers})
	if err != nil {
		row("-", "PostgreSQL store rows", "skipped", err.Error(), "-", "-")
		return
	}
	defer rt.Close()
	one := evalWith(ctx, xs[0].c.Evaluator(rt), "1+1")
	evs := []func(int) error{one, evalWith(ctx, xs[1].c.Evaluator(rt), "1+1")}
	two := func(i int) error { return evs[i%2](i) }
	// loadPG is load with PostgreSQL's processor time per eval.
	loadPG := func(conc int, f func(int) error) (loadStat, time.Duration, error) {
		c0 := pg.CPU()
		r, err := load(conc, execLoadN, execLoadMax, f)
		ticks := pg.CPU() - c0
		return r, time.Duration(ticks) * 10 * time.Millisecond / time.Duration(max(r.lat.n, 1)), err
	}
	name := fmt.Sprintf("PostgreSQL store: executor evals/s (`1+1`), %d worker(s), %d clients", workers, 2*workers)
	one(0)
	r1, pg1, err := loadPG(2*workers, one)
	if err != nil {
		row("-", name, "failed", err.Error(), "-", "-")
		return
	}
	l, err := load(2*workers, execLoadN, execLoadMax, evalWith(ctx, rt, "1+1"))
	if err != nil {
		row("-", name, r1.String(), "in-process failed: "+err.Error(), "-", "-")
		return
	}
	row("-", name, fmt.Sprintf("%s, PostgreSQL CPU %s each", r1, ms(pg1)), "in-process "+l.String(),
		fmt.Sprintf("%.2f×", r1.perSec/l.perSec), "-")
	f := measureFloors(ctx, "", pg.URL, 2*workers, pg)
	if sq == nil || sq.err != nil {
		f.err = fmt.Errorf("no round trip measured")
	} else if f.err == nil {
		f.trip = sq.trip
	}
	f.print(row, "PostgreSQL store: ", 2*workers, r1, l, pg1)
	name = fmt.Sprintf("PostgreSQL store: two executors, evals/s (`1+1`), %d worker(s) each, %d clients", workers, 4*workers)
	evs[1](0)
	r2, pg2, err := loadPG(4*workers, two)
	if err != nil {
		row("-", name, "failed", err.Error(), "-", "-")
		return
	}
	row("-", name, fmt.Sprintf("%s, PostgreSQL CPU %s each", r2, ms(pg2)), fmt.Sprintf("one executor %.0f/s", r1.perSec),
		fmt.Sprintf("%.2f×", r2.perSec/r1.perSec), "- (2 cores shared by both)")
}
