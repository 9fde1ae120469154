package executor

import (
	"context"
	"errors"
	"time"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// retryEvery is how often a write the store refused, and that must not
// be left undone, is tried again. Our choice: the store's outage is
// usually seconds (a database restart).
const retryEvery = time.Second

// refinish keeps trying to store a job's lost record (store_failed)
// after the store refused it. On a shared store this matters: the entry
// says "running" and its owner is alive, so no peer marks it lost, and a
// retry of its key would be told to wait for another executor forever.
// (A lone SQLite executor reads such an entry as lost already: lookup.)
func (s *Server) refinish(tenant, key string, started bool, data []byte) {
	s.retryWrite("the lost record of a job", func() error {
		err := s.store.finish(context.Background(), tenant, key, wire.StateLost, started, data)
		s.space.wrote(err)
		return err
	})
}

// retryWrite runs write every retryEvery until it succeeds or the server
// stops, in the background.
func (s *Server) retryWrite(what string, write func() error) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for {
			select {
			case <-s.base.Done():
				return
			case <-time.After(retryEvery):
			}
			if write() == nil {
				s.log.Info("stored "+what+" once the store was back", "what", what)
				return
			}
		}
	}()
}

// storeRefusal is the error for a store operation that failed (err),
// what being what was not done ("nothing was started", "the eval did
// not run"): store_full (507) when the store's disk is full, unavailable
// (503, with Retry-After) when the store could not be reached within
// its retries (a PostgreSQL restart or failover: retry the request, the
// same key), else internal (500).
func storeRefusal(err error, what string) *wire.Error {
	switch {
	case storeFull(err):
		return wire.Errorf(wire.CodeStoreFull, "the executor's store is full (%v); %s", err, what)
	case errors.Is(err, errStoreDown):
		return wire.Errorf(wire.CodeUnavailable, "the executor's store cannot be reached now (%v); %s: retry in a moment, with the same key", err, what)
	}
	return wire.Errorf(wire.CodeInternal, "store: %v; %s", err, what)
}

// storeFailure is the error of a job's final record when a store
// operation it needed failed (err) and it did not run (what says so):
// store_full when the store's disk is full, else internal — never
// unavailable, which says "send it again, the same key": a retry of the
// key is answered with this record, for good, so it must not ask for
// one (the client sends it again under a new key).
func storeFailure(err error, what string) *wire.Error {
	e := storeRefusal(err, what)
	if e.Code == wire.CodeUnavailable {
		e = wire.Errorf(wire.CodeInternal, "the executor's store could not be reached (%v); %s: send it again under a new key", err, what)
	}
	return e
}
