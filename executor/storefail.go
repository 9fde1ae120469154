package executor

import (
	"context"
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
