package executor

import "time"

// fleetRecount is how often an executor on a shared store reloads each
// tenant's stored bytes from it (records, and sessions' and paused
// evals' states), so that MaxStoredBytes holds across the fleet: what
// the other executors stored counts here within this long. Our choice:
// one small aggregate query per second per executor.
const fleetRecount = time.Second

// recountLoop reloads the stored bytes every fleetRecount (shared
// stores, and a lone SQLite executor keeping sessions in it; otherwise a
// lone executor counts its own writes).
func (s *Server) recountLoop() {
	defer s.bg.Done()
	t := time.NewTicker(fleetRecount)
	defer t.Stop()
	for {
		select {
		case <-s.base.Done():
			return
		case <-t.C:
			if err := s.recount(); err != nil {
				s.log.Warn("counting stored bytes in the store failed", "err", err)
			}
		}
	}
}

// recount sets the stored bytes per tenant from the store: records, and
// (with stored sessions) the states.
func (s *Server) recount() error {
	used, err := s.store.usage(s.base)
	if err != nil {
		return err
	}
	states := map[string]int64{}
	if s.evals != nil && s.evals.fleet != nil {
		if states, err = s.evals.fleet.st.stateBytes(s.base); err != nil {
			return err
		}
	}
	s.space.mu.Lock()
	s.space.used, s.space.states = used, states
	s.space.mu.Unlock()
	return nil
}
