package executor

import (
	"context"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// SetStreamWriteTimeout changes how long one event write may block (tests
// use a short one) and returns a function restoring the old value.
func SetStreamWriteTimeout(d time.Duration) func() {
	old := streamWriteTimeout
	streamWriteTimeout = d
	return func() { streamWriteTimeout = old }
}

// ToolSets is how many tool-set runtimes the server's evals hold.
func (s *Server) ToolSets() int {
	s.evals.mu.Lock()
	defer s.evals.mu.Unlock()
	return len(s.evals.sets)
}

// VMsRewound is how many VMs the engine behind the server's evals has
// rewound for reuse (glovebox.Stats.VMsRewound; engine-wide).
func (s *Server) VMsRewound() uint64 { return s.evals.base.Stats().VMsRewound }

// VMsReused is how many evals took a rewound VM (glovebox.Stats.VMsReused;
// engine-wide).
func (s *Server) VMsReused() uint64 { return s.evals.base.Stats().VMsReused }

// SetRefillHook makes f run as each spare eval worker starts, and returns
// a function restoring the old hook.
func SetRefillHook(f func()) func() {
	old := testHookRefill
	testHookRefill = f
	return func() { testHookRefill = old }
}

// CapLimits is c with the executor's caps applied, as a run gets them.
func (s *Server) CapLimits(c box.Command) box.Command { s.capLimits(&c); return c }

// EvalLimits is the glovebox.Limits an eval asking for l runs with.
func (s *Server) EvalLimits(l wire.EvalLimits) glovebox.Limits { return s.evals.limits(l) }

// StartPostgres starts a real PostgreSQL for t and returns its URL
// (pg_test.go); it skips where PostgreSQL cannot run.
func StartPostgres(t testing.TB) string { return startPostgres(t) }

// SetAcceptedDelay changes how long a quiet job's accepted event waits
// to go out with the next one, and returns a function restoring it.
func SetAcceptedDelay(d time.Duration) func() {
	old := acceptedDelay
	acceptedDelay = d
	return func() { acceptedDelay = old }
}

// Stored is the state and started flag the store holds for tenant's key
// ("" when it holds none).
func (s *Server) Stored(tenant, key string) (state string, started bool) {
	e, err := s.store.get(context.Background(), tenant, key)
	if err != nil {
		return "", false
	}
	return e.State, e.Started
}

// Recount reloads the stored bytes per tenant from the store now, as
// the loop does every second on a shared store.
func (s *Server) Recount() error { return s.recount() }

// StartPostgresCtl is startPostgresCtl for the external tests: the URL,
// and functions that stop (fast shutdown) and start the server.
func StartPostgresCtl(t testing.TB) (url string, stop, start func() error) {
	u, c := startPostgresCtl(t)
	return u, c.stop, c.start
}

// StealSessionLease hands session id's lease (SQLite store) to a holder
// of no executor, already run out, as if the running eval's had run out
// and another executor had taken it: the running eval's save then fails,
// and the next eval is not blocked.
func (s *Server) StealSessionLease(tenant, id string) error {
	st := s.store.(*sqliteStore)
	return st.write(true, func(tx wtx) error {
		_, err := tx.Exec(`UPDATE sessions SET holder = 'thief/x', until = 0 WHERE tenant = ? AND id = ?`, tenant, id)
		return err
	})
}

// SetRelayPoll changes how soon, and how often at most, a waiting tool
// call looks in the store for an answer relayed by another executor
// (relay.go), and returns a function restoring the old values.
func SetRelayPoll(first, most time.Duration) func() {
	f, m := pickupFirst, pickupMax
	pickupFirst, pickupMax = first, most
	return func() { pickupFirst, pickupMax = f, m }
}

// ExpireRelayed runs the janitor's sweep of relayed tool answers now.
func (s *Server) ExpireRelayed() { s.evals.expireRelayed(time.Now()) }

// StoredBytes is what the store itself holds for tenant: the bytes of
// its records, and of its sessions' and paused evals' states (with
// stored sessions; else 0).
func (s *Server) StoredBytes(tenant string) (records, states int64, err error) {
	u, err := s.store.usage(context.Background())
	if err != nil {
		return 0, 0, err
	}
	if s.evals != nil && s.evals.fleet != nil {
		st, err := s.evals.fleet.st.stateBytes(context.Background())
		if err != nil {
			return 0, 0, err
		}
		states = st[tenant]
	}
	return u[tenant], states, nil
}

// QuotaCounted is what the executor counts against tenant's
// MaxStoredBytes now: stored records and states, and the room its jobs
// in flight reserved.
func (s *Server) QuotaCounted(tenant string) int64 {
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	return s.space.used[tenant] + s.space.states[tenant] + s.space.reserved[tenant]
}
