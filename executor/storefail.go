package executor

import (
	"context"
	"time"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// refinishEvery is how often a lost record that could not be stored
// (the store was down) is tried again. Our choice: the store's outage
// is usually seconds (a database restart).
const refinishEvery = time.Second

// refinish keeps trying to store a job's lost record (store_failed)
// after the store refused it, until the store takes it or the server
// stops. On a shared store this matters: the entry says "running" and
// its owner is alive, so no peer marks it lost, and a retry of its key
// would be told to wait for another executor forever. (A lone SQLite
// executor reads such an entry as lost already: lookup.)
func (s *Server) refinish(tenant, key string, started bool, data []byte) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for {
			select {
			case <-s.base.Done():
				return
			case <-time.After(refinishEvery):
			}
			err := s.store.finish(context.Background(), tenant, key, wire.StateLost, started, data)
			s.space.wrote(err)
			if err == nil {
				s.log.Info("stored the lost record of a job once the store was back", "tenant", tenant, "key", key)
				return
			}
		}
	}()
}
