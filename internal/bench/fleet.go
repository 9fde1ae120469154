package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
	"github.com/gloveboxhq/glovebox/internal/pgtest"
)

// ExecutorFleet adds the row of a session's eval (`$n += 1`) through a
// fleet of two executors on one real PostgreSQL (started here, on a Unix
// socket) with stored sessions: each eval through the other executor
// than the session's last one (so each resumes the session's state from
// the store), beside evals through the same executor (its cached live
// session, one version check and one state write per eval), one client,
// one eval at a time.
func ExecutorFleet(ctx context.Context, row Row) {
	const what = "executor fleet: session eval through the other replica (`$n += 1`)"
	dir, err := os.MkdirTemp("", "glovebox-bench-fleet")
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	defer os.RemoveAll(dir)
	pg, err := pgtest.Start()
	if err != nil {
		row("-", what, "not available", err.Error(), "-", "-")
		return
	}
	defer pg.Stop()
	sec := make([]byte, 32)
	rand.Read(sec)
	keys, _ := glovebox.NewKeyring(glovebox.StateKey{ID: "bench", Secret: sec})
	tok, _, err := executor.MintToken()
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	b, err := bwrap.New(bwrap.Config{})
	if err != nil {
		row("-", what, "not available", err.Error(), "-", "-")
		return
	}
	var xs [2]*execServer
	for i := range xs {
		xs[i], err = startExecServerWith(ctx, dir, 1, b, pg.URL, func(c *executor.EvalConfig) { c.StateKeys = keys }, tok)
		if err != nil {
			row("-", what, "not available", err.Error(), "-", "-")
			return
		}
		defer xs[i].done()
	}
	rt, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1})
	if err != nil {
		row("-", what, "skipped", err.Error(), "-", "-")
		return
	}
	defer rt.Close()
	s0, err := xs[0].c.Evaluator(rt).NewSession(ctx)
	if err != nil {
		row("-", what, "failed", err.Error(), "-", "-")
		return
	}
	ss := [2]*client.Session{s0, xs[1].c.Evaluator(rt).Attach(s0.ID())}
	step := func(s *client.Session) error {
		res, err := s.Eval(ctx, "$n = ($n || 0) + 1")
		if err == nil && res.Status != glovebox.StatusOK {
			err = fmt.Errorf("%s %+v", res.Status, res.Error)
		}
		return err
	}
	for _, s := range ss { // warm: connections, each replica's tool set
		if err := step(s); err != nil {
			row("-", what, "failed", err.Error(), "-", "-")
			return
		}
	}
	other, err := load(1, execLoadN, execLoadMax, func(i int) error { return step(ss[i%2]) })
	if err != nil {
		row("-", what, "failed", err.Error(), "-", "-")
		return
	}
	same, err := load(1, execLoadN, execLoadMax, func(int) error { return step(ss[0]) })
	if err != nil {
		row("-", what, other.String(), "same replica failed: "+err.Error(), "-", "-")
		return
	}
	row("-", what, other.String(), "same replica "+same.String(), fmt.Sprintf("%.2f×", other.perSec/same.perSec), "-")
}
