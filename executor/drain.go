package executor

import (
	"context"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// Drain makes the server refuse new jobs (unavailable, and /readyz 503)
// and waits until the running ones finish or ctx ends (the grace
// period); then it stops what still runs, whose records say lost with the
// reason (never run again under their keys; queued ones end failed,
// unavailable: they did not run), and waits for their records. Last it
// closes the live sessions this process cached: with stored sessions
// (EvalConfig.StateKeys) each one's state is in the store already, so
// the next eval of it runs on any executor sharing the store.
func (s *Server) Drain(ctx context.Context) {
	// Under mu: serveJob admits a job (wg.Add) under mu after checking
	// draining, so from here on no job is added.
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.cut.Store(true)
		s.stop()
		<-done
	}
	if s.evals != nil {
		s.evals.fleetCloseAll()
	}
}

// drainedRecord is the record of a job Drain stopped at the end of its
// grace period.
func drainedRecord(kind string) *wire.Record {
	return &wire.Record{State: wire.StateLost, Error: wire.Errorf(wire.CodeLost,
		"the executor was draining (SIGTERM) and its grace period ended while the %s ran: it was stopped, may have partly run, and is never run again under this key", kind)}
}
