package executor

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// jobSpec is one idempotent unit of work (a run; an eval reuses it with
// its own kind and work): the per-tenant key, the request hash compared
// on reuse, an optional expiry and the work itself. work runs under the
// server's context (not the request's: a client that goes away does not
// stop it) and returns the final record; it streams events with j.emit.
type jobSpec struct {
	kind, key, hash string
	expires         *time.Time
	// maxRecord is the most bytes the job's final record can take (its
	// output limits in base64, and room for the rest): what it reserves
	// of its tenant's MaxStoredBytes.
	maxRecord int64
	work      func(ctx context.Context, j *job) *wire.Record
	// attach, when set, is called for each request served by the job's
	// stream (the first and every attached one) after the accepted
	// event; evals use it to hand tool calls to whichever client holds
	// the stream. It returns events for this request only (again),
	// sent once the replay has passed the first at events of the log:
	// they are not appended to the log, which a client attaching over
	// and over would otherwise grow without bound. Nil for runs.
	attach func(j *job, st *eventStream) (at int, again []wire.Event)
	// detach, when set, is called once a stream attach saw has ended
	// (the client went away, or the job's record was sent); evals use
	// it to hand waiting tool calls on only from a stream that is gone.
	detach func(st *eventStream)
	// handed, when set, takes the events handed to stream st since its
	// attach (detach handing it a gone holder's calls), for st only, as
	// again is: nil when there are none.
	handed func(st *eventStream) []wire.Event
}

// job is a job in memory from admission until its final record is
// stored: its events so far (so an attaching request replays them in
// order) and its end.
type job struct {
	spec   jobSpec
	tenant *tenant

	mu     sync.Mutex
	events []wire.Event
	// pend is output not yet an event: writes of one stream (pendType)
	// coalesced into one event of up to maxEventData bytes, emitted when
	// full, when another event or the end comes, or flushEvery after its
	// first byte (flushing is then set), so the event count follows the
	// bytes and the time, not the number of writes.
	pend     []byte
	pendType string
	flushing bool
	changed  chan struct{} // closed and replaced at each emit and at the end
	// onEvent, when set, runs (once, then is cleared) at the first event
	// before the end: it starts the goroutine following the first
	// request's stream (runAndFollow).
	onEvent func()
	final   *wire.Record // set once, at the end
	// finalJSON is final's JSON as the store got it (json.Marshal), or
	// nil: the result event is written from it rather than encoding
	// the record again for each stream (finish).
	finalJSON []byte
	state     string
	// ready is closed once the store said whether this key was new
	// (existing is then nil) or already recorded (existing is that
	// entry, and the job never runs).
	ready    chan struct{}
	existing *entry
	failed   *wire.Error // the store failed at begin

	// next is 2 when the job took its tenant's and the server's next
	// place at admission (it was recorded running: no queue, one write
	// less).
	next int
	// budget is the room reserved for its final record in its tenant's
	// MaxStoredBytes when it started (negative: none, or no bound); the
	// record is cut to fit.
	budget int64

	ctx    context.Context // the job's; cancel ends it (DELETE, shutdown)
	cancel context.CancelFunc
	done   chan struct{} // closed once final is set
}

// Output coalescing: an output event carries up to maxEventData bytes,
// and output waits at most flushEvery to become one. A program writing
// a byte at a time a million times makes a few hundred events, not a
// million (each event costs a slice header and a JSON line on every
// stream following the job: 49 → 648 MiB measured before). Our choices:
// 64 KiB is the pipe buffer's size; 20 ms is below what a person
// watching output notices.
const (
	maxEventData = 64 << 10
	flushEvery   = 20 * time.Millisecond
)

// emit appends an event (after the output pending before it, to keep
// the order) and wakes the streams following the job.
func (j *job) emit(ev wire.Event) {
	j.mu.Lock()
	j.flushLocked()
	j.events = append(j.events, ev)
	j.wakeLocked()
	j.mu.Unlock()
}

// output adds p, written by the job to stdout or stderr (typ), to its
// event log, coalesced with the writes around it (see maxEventData).
// p is copied.
func (j *job) output(typ string, p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pendType != typ {
		j.flushLocked()
		j.pendType = typ
	}
	for len(p) > 0 {
		if j.pend == nil {
			j.pend = make([]byte, 0, min(max(len(p), 512), maxEventData))
		}
		n := min(len(p), maxEventData-len(j.pend))
		j.pend, p = append(j.pend, p[:n]...), p[n:]
		if len(j.pend) == maxEventData {
			j.flushLocked()
			j.pendType = typ
		}
	}
	if len(j.pend) > 0 && !j.flushing {
		j.flushing = true
		time.AfterFunc(flushEvery, func() {
			j.mu.Lock()
			j.flushing = false
			j.flushLocked()
			j.mu.Unlock()
		})
	}
}

// flushLocked turns the pending output into an event. Called with mu.
func (j *job) flushLocked() {
	if len(j.pend) == 0 {
		return
	}
	j.events = append(j.events, wire.Event{Type: j.pendType, Data: j.pend})
	j.pend, j.pendType = nil, ""
	j.wakeLocked()
}

// wakeLocked wakes the streams following the job, and has the first
// request's stream followed if it is not yet (onEvent). Called with mu.
// poke wakes j's streams without adding an event (they look for events
// handed to them alone: jobSpec.handed).
func (j *job) poke() {
	j.mu.Lock()
	close(j.changed)
	j.changed = make(chan struct{})
	j.mu.Unlock()
}

func (j *job) wakeLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
	if j.onEvent != nil && j.final == nil {
		j.onEvent()
		j.onEvent = nil
	}
}

func (j *job) setState(s string) {
	j.mu.Lock()
	j.state = s
	j.mu.Unlock()
}

// finish ends the job with rec; data is rec's JSON (json.Marshal of
// it as it is now), or nil.
func (j *job) finish(rec *wire.Record, data []byte) {
	j.mu.Lock()
	j.flushLocked()
	j.final, j.finalJSON = rec, data
	close(j.done)
	j.wakeLocked()
	j.mu.Unlock()
}

// serveJob is the idempotency core shared by runs and evals: it attaches
// to the tenant's live job with this key, answers from the stored record,
// or records a new job and starts it; then it streams the job's events to
// w until its final record.
func (s *Server) serveJob(w http.ResponseWriter, r *http.Request, t *tenant, spec jobSpec) {
	id := t.Name + "\x00" + spec.key
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		s.refuse(w, r, wire.Errorf(wire.CodeUnavailable, "the executor is draining"))
		return
	}
	if j, ok := s.active[id]; ok {
		s.mu.Unlock()
		<-j.ready
		if j.failed != nil {
			s.refuse(w, r, j.failed)
			return
		}
		if j.existing != nil {
			s.answerStored(w, r, j.existing, spec)
			return
		}
		if j.spec.hash != spec.hash || j.spec.kind != spec.kind {
			s.refuse(w, r, conflict(spec.key))
			return
		}
		s.follow(w, r, j, true)
		return
	}
	if !t.reserve() {
		s.mu.Unlock()
		s.refuseNew(w, r, t, spec, wire.Errorf(wire.CodeQueueFull, "tenant %s has %d runs running and %d queued", t.Name, t.MaxConcurrentRuns, t.MaxQueuedRuns))
		return
	}
	// Room in the store: the disk, and the tenant's quota of records
	// (reserved when the job starts).
	werr := s.space.diskShort(false)
	if werr == nil {
		werr = s.space.check(t)
	}
	if werr != nil {
		t.release()
		s.mu.Unlock()
		s.refuseNew(w, r, t, spec, werr)
		return
	}
	j := &job{spec: spec, tenant: t, changed: make(chan struct{}), ready: make(chan struct{}), state: wire.StateQueued, done: make(chan struct{}), budget: -1}
	j.ctx, j.cancel = context.WithCancel(s.base)
	s.active[id] = j
	s.wg.Add(1)
	s.mu.Unlock()

	// With a free next place (see execute) the job is recorded running
	// at once (one durable write before the backend sees it); else
	// queued, and running later. Either way it is reported queued (to
	// followers, lookups and the queue metric) until it has its slot,
	// unless a slot is free now.
	state, shown := wire.StateQueued, wire.StateQueued
	select {
	case t.next <- struct{}{}:
		select {
		case s.next <- struct{}{}:
			j.next, state = 2, wire.StateRunning
			if len(t.slot) < cap(t.slot) && s.slots.freeNow() > 0 {
				shown = wire.StateRunning
			}
		default:
			<-t.next
		}
	default:
	}
	now := time.Now()
	old, created, err := s.store.begin(s.base, &entry{Tenant: t.Name, Key: spec.key, Kind: spec.kind, Hash: spec.hash,
		State: state, Started: state == wire.StateRunning, Created: now})
	s.space.wrote(err)
	if err != nil || !created {
		if j.next == 2 {
			<-s.next
			<-t.next
		}
		j.cancel()
		if err != nil {
			j.failed = storeRefusal(err, "nothing was started")
		}
		j.existing = old
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		t.release()
		s.wg.Done()
		close(j.ready)
		if j.failed != nil {
			s.refuse(w, r, j.failed)
			return
		}
		s.answerStored(w, r, old, spec)
		return
	}
	if shown == wire.StateQueued { // counted before a lookup can read "queued"
		s.m.of(spec.kind, s.backendOf(spec.kind)).queued.Inc()
	}
	j.setState(shown) // lookups read it (server.go)
	close(j.ready)
	// One line per job at Info: "finished" (kind, tenant, key, state,
	// ms). A run's acceptance is logged too, as it may run for minutes;
	// an eval's only at Debug, as its end follows within its timeout
	// (two lines per `1+1` were 2% of its processor time through the
	// executor, by CPU profile).
	lvl := slog.LevelInfo
	if spec.kind == "eval" {
		lvl = slog.LevelDebug
	}
	if s.log.Enabled(s.base, lvl) { // else not even the arguments
		s.log.Log(s.base, lvl, "accepted", "kind", spec.kind, "tenant", t.Name, "key", spec.key, "state", state)
	}
	s.runAndFollow(w, r, j, id, now)
}

// runAndFollow runs the job on the request's goroutine and streams it to
// w. The stream is followed on a goroutine of its own only once the job
// has something to send before its end (an event, or acceptedDelay
// passed: its accepted event is due); a job that ends first, a quick
// eval, is answered here after it, one goroutine and two hand-offs
// fewer. The job goes on if the client goes away (only the writes
// fail).
func (s *Server) runAndFollow(w http.ResponseWriter, r *http.Request, j *job, id string, now time.Time) {
	st, at, again := s.open(w, j, false)
	var (
		mu      sync.Mutex
		started bool
		stopped bool
		done    = make(chan struct{})
	)
	start := func(hold time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if started || stopped {
			return
		}
		started = true
		go func() {
			defer close(done)
			s.streamDetach(st, r, j, at, again, hold)
		}()
	}
	quiet := time.AfterFunc(acceptedDelay, func() { start(0) }) // accepted is due
	j.mu.Lock()
	j.onEvent = func() { start(acceptedDelay) }
	j.mu.Unlock()
	s.execute(j, id, now)
	quiet.Stop()
	mu.Lock()
	stopped = true
	mu.Unlock()
	if started {
		<-done
		return
	}
	s.streamDetach(st, r, j, at, again, acceptedDelay)
}

// refuseNew refuses a job that was not admitted with e, unless its key
// names a finished job: a retry of one is answered from its record even
// when the tenant is at a limit or the store is full.
func (s *Server) refuseNew(w http.ResponseWriter, r *http.Request, t *tenant, spec jobSpec, e *wire.Error) {
	if old, err := s.store.get(r.Context(), t.Name, spec.key); err == nil && wire.Final(old.State) {
		s.answerStored(w, r, old, spec)
		return
	}
	s.refuse(w, r, e)
}

func conflict(key string) *wire.Error {
	return wire.Errorf(wire.CodeKeyConflict, "idempotency key %s was used for a different request", key)
}

// answerStored answers a request whose key is already recorded (by an
// earlier process, or a job that ended): the record if the request is the
// same, key_conflict if not.
func (s *Server) answerStored(w http.ResponseWriter, r *http.Request, e *entry, spec jobSpec) {
	if e.Hash != spec.hash || e.Kind != spec.kind {
		s.refuse(w, r, conflict(spec.key))
		return
	}
	rec := recordOf(e)
	if !wire.Final(rec.State) && s.cfg.StoreURL != "" {
		// A shared store: another executor of the fleet holds this job.
		s.refuse(w, r, wire.Errorf(wire.CodeUnavailable, "the %s with key %s is %s on another executor of the fleet; retry it later for its outcome (it is not run again)", e.Kind, e.Key, rec.State))
		return
	}
	st := newEventStream(w)
	st.send(&wire.Event{Type: wire.EventAccepted, Key: e.Key, Attached: true, State: rec.State})
	if !wire.Final(rec.State) { // cannot happen: recover marks these lost at start
		rec.State, rec.Error = wire.StateLost, wire.Errorf(wire.CodeLost, "the record of %s is in state %s with no job", e.Key, e.State)
	}
	st.send(&wire.Event{Type: wire.EventResult, Record: rec})
	s.log.Info("answered from the store", "tenant", e.Tenant, "key", e.Key, "state", rec.State)
}

// follow streams j's events (from the first) to w, then its record. It
// returns when the job ends or the client goes away; the job goes on.
//
// Events are flushed in batches: whatever the log holds when follow
// looks is written and flushed at once. The accepted event (and an
// eval's holder) is not flushed by itself: it goes with the first event
// after it, or with the result, which net/http sends with the end of the
// stream when follow returns; only a job quiet for acceptedDelay has it
// flushed alone. A quick eval is then answered in one write to the
// connection instead of three.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, j *job, attached bool) {
	st, at, again := s.open(w, j, attached)
	s.streamDetach(st, r, j, at, again, acceptedDelay)
}

// streamDetach is stream, then the job's detach for st.
func (s *Server) streamDetach(st *eventStream, r *http.Request, j *job, at int, again []wire.Event, hold time.Duration) {
	s.stream(st, r, j, at, again, hold)
	if j.spec.detach != nil {
		j.spec.detach(st)
	}
}

// open starts j's stream on w: the accepted event (buffered, see follow)
// and, for an eval, the request's holder event and the calls to hand it
// again (attach).
func (s *Server) open(w http.ResponseWriter, j *job, attached bool) (st *eventStream, at int, again []wire.Event) {
	st = newEventStream(w)
	j.mu.Lock()
	state := j.state
	j.mu.Unlock()
	if st.write(&wire.Event{Type: wire.EventAccepted, Key: j.spec.key, Attached: attached, State: state}) == nil && j.spec.attach != nil {
		at, again = j.spec.attach(j, st)
	}
	return st, at, again
}

// stream is follow after open; an accepted event with nothing after it
// is flushed alone after hold.
func (s *Server) stream(st *eventStream, r *http.Request, j *job, at int, again []wire.Event, hold time.Duration) {
	if st.err != nil {
		return
	}
	var quiet *time.Timer // flushes the accepted event of a quiet job
	defer func() {
		if quiet != nil {
			quiet.Stop()
		}
	}()
	for i := 0; ; {
		wrote := false
		if again != nil && i >= at {
			for k := range again {
				if st.write(&again[k]) != nil {
					return
				}
			}
			again, wrote = nil, len(again) > 0
		}
		j.mu.Lock()
		evs, final, finalJSON, changed := j.events[i:], j.final, j.finalJSON, j.changed
		j.mu.Unlock()
		if again != nil && i+len(evs) > at {
			evs = evs[:at-i]
		}
		for k := range evs {
			if st.write(&evs[k]) != nil {
				return
			}
		}
		i += len(evs)
		if again != nil && i >= at {
			continue // hand this request its calls now
		}
		if again == nil && j.spec.handed != nil {
			for _, ev := range j.spec.handed(st) {
				if st.write(&ev) != nil {
					return
				}
				wrote = true
			}
		}
		if final != nil && len(evs) == 0 {
			if finalJSON != nil {
				st.writeResult(finalJSON)
			} else {
				st.write(&wire.Event{Type: wire.EventResult, Record: final})
			}
			return // net/http flushes it with the end of the stream
		}
		if final != nil {
			continue
		}
		if wrote || len(evs) > 0 {
			if st.flush() != nil {
				return
			}
		}
		st.idle()
		var flushNow <-chan time.Time
		if st.unflushed > 0 {
			if quiet == nil {
				quiet = time.NewTimer(hold)
			}
			flushNow = quiet.C
		}
		select {
		case <-changed:
		case <-flushNow:
			if st.flush() != nil {
				return
			}
			st.idle()
			select {
			case <-changed:
			case <-r.Context().Done():
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// acceptedDelay is how long follow holds back the accepted event of a
// job that sends nothing else, hoping to send it with the result (one
// write instead of two). Our choice: 10 ms is longer than most evals
// take, and less than anything a client waits on (it learns nothing
// from accepted that it needs sooner).
var acceptedDelay = 10 * time.Millisecond

// execute waits for a slot, runs the job and stores its final record.
//
// A job waits twice: for a next place (its tenant's and the server's,
// nextPlaces per slot), then, recorded running, for a slot. The
// durable write that must precede the work (running) is thus made while
// the slots are busy with other jobs' work, not while a slot waits for
// the disk: with an fsync of a millisecond and evals of less, a slot
// held through the write sat idle most of the time. A crash between the
// write and the slot leaves the job lost with started set ("may have
// partly run"), the conservative side; started is cleared again in its
// final record if it ends without running (cancelled, expired).
func (s *Server) execute(j *job, id string, queuedAt time.Time) {
	defer s.wg.Done()
	t, kind := j.tenant, j.spec.kind
	backend := s.backendOf(kind) // eval.go: evals run in the wasm engine
	km := s.m.of(kind, backend)
	started, rec := false, (*wire.Record)(nil)
	var expire <-chan time.Time
	if j.spec.expires != nil {
		tm := time.NewTimer(time.Until(*j.spec.expires))
		defer tm.Stop()
		expire = tm.C
	}
	j.mu.Lock()
	counted := j.state == wire.StateQueued // in the queue metric
	j.mu.Unlock()
	next := j.next
	if next < 2 {
		next = j.take(t.next, s.next, expire)
	}
	slots := 0
	var werr *wire.Error
	if next == 2 {
		if j.budget, werr = s.space.reserve(t, j.spec.maxRecord); werr != nil {
			j.budget = -1
		} else if j.next < 2 {
			// The state is durable before the backend sees the command:
			// a crash from here on leaves "running", which the next
			// start reports as lost, never runs again. (A job that had
			// its next place at admission was recorded running then.)
			err := s.store.update(s.base, t.Name, j.spec.key, wire.StateRunning, true, nil)
			s.space.wrote(err)
			if err != nil {
				werr = storeFailure(err, "the "+kind+" did not run")
			}
		}
		if werr == nil {
			// A job shown running at admission (a slot looked free)
			// that finds the slot taken meanwhile is shown queued, and
			// counted in the queue, while it waits: a lookup never
			// reads running for a job without its slot.
			slots = j.takeSlot(t.slot, t.Name, s.slots, expire, func() {
				if !counted {
					counted = true
					km.queued.Inc()
					j.setState(wire.StateQueued)
				}
			})
		}
	}
	if next >= 2 {
		<-s.next
	}
	if next >= 1 {
		<-t.next
	}
	if counted {
		km.queued.Dec()
	}
	km.wait.Observe(time.Since(queuedAt).Seconds())
	switch {
	case werr != nil:
		rec = &wire.Record{State: wire.StateFailed, Error: werr}
	case slots < 2 && s.base.Err() != nil:
		rec = &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeUnavailable, "the executor shut down before the %s started; it did not run", kind)}
	case slots < 2 && j.ctx.Err() != nil:
		rec = &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeCanceled, "cancelled before it started; it did not run")}
	case slots < 2:
		rec = &wire.Record{State: wire.StateExpired, Error: wire.Errorf(wire.CodeRunExpired, "still queued at its expires_at; it did not run")}
	default:
		started = true
		j.setState(wire.StateRunning)
		km.running.Inc()
		t0 := time.Now()
		rec = s.safeWork(j)
		if s.cut.Load() && j.ctx.Err() != nil {
			rec = drainedRecord(kind) // drain.go
		}
		km.duration.Observe(time.Since(t0).Seconds())
		km.running.Dec()
	}
	if slots >= 2 {
		s.slots.release(t.Name)
	}
	if slots >= 1 {
		<-t.slot
	}
	now := time.Now()
	rec.Key, rec.Backend, rec.Started, rec.Finished, rec.Created = j.spec.key, backend, started, &now, queuedAt
	data, err := fitRecord(rec, j.budget)
	if err == nil {
		err = s.store.finish(context.Background(), t.Name, j.spec.key, rec.State, started, data)
		s.space.wrote(err)
	}
	if err != nil {
		// Followers must not be told an outcome the store does not
		// hold: they get "lost" (store_failed), which is what the store
		// says from now on: this smaller record if it can be written,
		// else the "running" entry, read as lost (lookup, and recover at
		// the next start). The job is never run again either way.
		s.log.Error("storing a final record failed", "tenant", t.Name, "key", j.spec.key, "state", rec.State, "err", err)
		rec = storeFailedRecord(rec, kind, err)
		data, _ = json.Marshal(rec)
		if s.store.finish(context.Background(), t.Name, j.spec.key, rec.State, started, data) != nil {
			s.refinish(t.Name, j.spec.key, started, data) // storefail.go
			data = nil
		}
	}
	s.space.settle(t.Name, j.budget, len(data))
	s.m.finished(km, kind, rec.State, backend)
	if s.log.Enabled(s.base, slog.LevelInfo) { // typed attributes: no boxing of each value
		s.log.LogAttrs(s.base, slog.LevelInfo, "finished", slog.String("kind", kind), slog.String("tenant", t.Name), slog.String("key", j.spec.key),
			slog.String("state", rec.State), slog.Int64("ms", time.Since(queuedAt).Milliseconds()))
	}
	j.finish(rec, data) // data: rec's JSON, as stored (nil if refinish holds it)
	j.cancel()
	s.mu.Lock()
	delete(s.active, id)
	s.mu.Unlock()
	t.release()
}

// nextPlaces is how many jobs per slot may be recorded running while
// they wait for one (execute). Our choice: 2 lets a client per slot be
// answered and send its next request while the last one's successor
// waits, so that a steady load needs no queued → running write; a job
// killed in that wait reads "may have partly run" (started) though it
// had not begun.
const nextPlaces = 2

// take takes a place in a (the tenant's) and then in b (the server's),
// giving up when expire fires or the job's context ends; it returns how
// many it holds (2: both), for the caller to give back.
func (j *job) take(a, b chan struct{}, expire <-chan time.Time) int {
	if !j.enter(a, expire) {
		return 0
	}
	if !j.enter(b, expire) {
		return 1
	}
	return 2
}

// enter waits for a place in c; false (nothing held) when expire fires
// or the job's context ends first.
func (j *job) enter(c chan struct{}, expire <-chan time.Time) bool {
	select {
	case c <- struct{}{}:
		return true
	case <-expire:
	case <-j.ctx.Done():
	}
	return false
}

// takeSlot is take for the slots that run work: one of the tenant's,
// then one of the server's, shared fairly among tenants (fair.go).
// wait runs (on this goroutine) before it blocks for either; it may run
// twice.
func (j *job) takeSlot(own chan struct{}, tenant string, slots *fairSlots, expire <-chan time.Time, wait func()) int {
	select {
	case own <- struct{}{}:
	default:
		wait()
		if !j.enter(own, expire) {
			return 0
		}
	}
	if slots.try(tenant) {
		return 2
	}
	wait()
	if slots.acquire(tenant, expire, j.ctx.Done()) {
		return 2
	}
	return 1
}

// liveJob is the tenant's job under key that has not finished yet, or
// nil. Evals use it to route tool results to the waiting eval.
func (s *Server) liveJob(tenant, key string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.active[tenant+"\x00"+key]
	if j == nil || j.existing != nil || j.failed != nil {
		return nil
	}
	return j
}

// safeWork runs the job's work; a panic in it fails the job instead of
// the process.
func (s *Server) safeWork(j *job) (rec *wire.Record) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("job panicked", "kind", j.spec.kind, "key", j.spec.key, "panic", p)
			rec = &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeInternal, "the executor failed while running it")}
		}
	}()
	rec = j.spec.work(j.ctx, j)
	if rec == nil {
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeInternal, "no record")}
	}
	return rec
}
