package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Pool keeps VMs ready for evals, each already prepared — with a given
// set of tools defined, and warmed — so an eval does not wait for one to
// be made. A VM whose eval ended cleanly is rewound and runs a later eval
// (rewind.go); every eval sees a fresh VM's state. A Pool is safe for
// concurrent use.
type Pool struct {
	e       *Engine
	snap    *snapshot
	mounts  []Mount
	tools   []string
	scratch *scratchDirs
	ready   *vmStack // prepared VMs, the most recently used on top; nil: no pool
	idle    *idleVMs // its VMs rewound after clean evals (rewind.go)
	closing chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	closed  bool // set by Close; guarded by e.poolsMu
	hits    atomic.Uint64
	misses  atomic.Uint64

	// The filler prepares VMs only once the pool has been quiet — none of
	// its evals running, the last one ended quietAfter ago — so that a
	// VM is never prepared beside an eval. busy counts running evals,
	// lastEnd is when the last one ended (UnixNano), and kick wakes the
	// filler when a ready VM is taken. quiet fires quietAfter after the
	// last eval ended with none running: the first eval to start stops
	// it, the last to end sets it again, so under load the filler sleeps
	// instead of waking every quietAfter to look (1,000 wake-ups a
	// second, each a thread woken on a core the evals want).
	busy    atomic.Int64
	lastEnd atomic.Int64
	kick    chan struct{}
	quiet   *time.Timer
	wakes   atomic.Uint64 // times the filler woke to look, for tests
}

// NewPool starts a pool of size VMs prepared with tools and mounts (0
// keeps none ready: each eval makes its VM). A mount layout used for the
// first time has its snapshot built first (Ruby boots: about a second).
// Scratch directories go under scratchBase ("": DefaultScratchBase).
func (e *Engine) NewPool(ctx context.Context, size int, tools []string, mounts []Mount, scratchBase string) (*Pool, error) {
	snap, err := e.snapshotFor(ctx, mounts)
	if err != nil {
		return nil, err
	}
	p := &Pool{e: e, snap: snap, mounts: append([]Mount(nil), mounts...), tools: append([]string(nil), tools...),
		closing: make(chan struct{}), scratch: newScratchDirs(scratchBase), idle: &idleVMs{}}
	if size > 0 {
		p.ready = &vmStack{max: size}
		p.kick = make(chan struct{}, 1)
		p.idle.lazy = true
		p.quiet = time.NewTimer(0) // an idle new pool fills at once
		p.wg.Add(1)
		go p.fill()
	}
	e.poolsMu.Lock()
	e.pools[p] = true
	e.poolsMu.Unlock()
	return p, nil
}

// Eval runs req (whose Tools must be the pool's) in a fresh VM.
//
// The pool's filler prepares VMs only while the pool is quiet (see
// quietAfter), so that preparing never takes a core from a running eval.
// Under back-to-back load the pool so stays empty and each eval makes its
// VM, as it would without a pool (the filler used to keep preparing on
// the other core: half the evals found a VM ready, for the same p50 as
// making one, 401 against 399 µs in one run); with 10 ms between evals
// each finds one ready.
func (p *Pool) Eval(ctx context.Context, req *Request) (*Outcome, error) {
	p.begin()
	defer p.end()
	return p.e.eval(ctx, req, p.get, nil)
}

// begin and end bracket an eval of the pool's: while any runs, the
// filler's quiet timer is stopped; the last to end sets it.
func (p *Pool) begin() {
	if p.busy.Add(1) == 1 && p.quiet != nil {
		p.quiet.Stop()
	}
}

func (p *Pool) end() {
	p.lastEnd.Store(time.Now().UnixNano())
	if p.busy.Add(-1) == 0 && p.quiet != nil {
		p.quiet.Reset(quietAfter)
	}
}

// quietAfter is how long after its last eval ended, with none running, a
// pool refills. Evals arriving more often than this find the pool empty
// and make their VMs; with 10 ms between them, each finds one ready.
const quietAfter = time.Millisecond

// get returns a prepared VM. The mounts' host directories are checked
// first: one that is gone, or not a directory, is a MountError; one
// replaced since a pooled VM opened it sends that VM away.
func (p *Pool) get() (*VM, error) {
	fresh, err := checkMounts(p.mounts)
	if err != nil {
		return nil, err
	}
	for {
		// Back to back, the VM the last eval left (waiting to be rewound)
		// is warm in the caches, and rewinding it costs less than running
		// in a ready VM that the filler readied in the last pause, cold:
		// in glovebox bench's back-to-back rounds, the evals that took a
		// ready VM had a p50 of 216-267 µs, those that rewound the last
		// one 149-183 µs (three rounds of ten). Ready VMs are for evals
		// after a pause.
		if time.Now().UnixNano()-p.lastEnd.Load() < int64(quietAfter) {
			if v, err := p.e.reused(p.idle, p.tools, false); v != nil || err != nil {
				p.misses.Add(1)
				return v, err
			}
		}
		// A VM the filler gives back after this is seen below or
		// waited for.
		backs := p.idle.backsSoFar()
		if v := p.ready.pop(); v != nil {
			select {
			case p.kick <- struct{}{}: // there is room now
			default:
			}
			switch {
			case v.group != p.idle.memGroup():
				// Made by the filler before DisableReuse or SetMemoryGroup,
				// in memory of another group: not for this pool's evals.
				v.close()
			case fresh(v):
				p.hits.Add(1)
				return v, nil
			default:
				p.e.recycle(v)
			}
			continue
		}
		if v, err := p.e.reused(p.idle, p.tools, false); v != nil || err != nil {
			p.misses.Add(1)
			return v, err
		}
		// The filler may be rewinding or renewing the pool's VMs: one of
		// them, a rewind away (tens of µs warm), beats making a VM
		// (about 1 ms of processor time: see idleVMs.out).
		if !p.idle.awaitOut(backs) {
			break
		}
	}
	p.misses.Add(1)
	return p.e.made(p.snap, p.mounts, p.tools, p.scratch, p.idle)
}

// fill keeps the pool full, preparing VMs only while the pool is quiet.
// It is the only sender on p.ready.
func (p *Pool) fill() {
	defer p.wg.Done()
	for {
		if p.ready.full() && !p.idle.hasDirty() {
			select {
			case <-p.kick:
			case <-p.closing:
				return
			}
			continue
		}
		if wait := quietAfter - time.Duration(time.Now().UnixNano()-p.lastEnd.Load()); p.busy.Load() > 0 || wait > 0 {
			// Wait for the pool to be quiet. An eval running now, or one
			// that started and ended since the check, sets the timer when
			// the last of them ends; an eval that ended just now without
			// another running has set it already. Otherwise set it here.
			if p.busy.Load() == 0 && wait > 0 {
				p.quiet.Reset(wait)
			}
			select {
			case <-p.quiet.C:
				p.wakes.Add(1)
			case <-p.closing:
				return
			}
			continue
		}
		p.idle.rewindDirty()
		if p.ready.full() {
			continue
		}
		v, err := p.e.reused(p.idle, p.tools, true)
		if v != nil {
			p.ready.push(v) // before gave, which wakes evals to look
			p.idle.gave(nil)
			continue
		}
		if err == nil {
			v, err = p.e.made(p.snap, p.mounts, p.tools, p.scratch, p.idle)
		}
		if err != nil {
			// A missing mount directory is the evals' to report (each
			// ends with sandbox_error saying so); anything else is news.
			var me *MountError
			if errors.As(err, &me) {
				p.e.log.Debug("glovebox: a mount is unusable; the pool waits", "err", err)
			} else {
				p.e.log.Warn("glovebox: preparing a pooled VM failed", "err", err)
			}
			select {
			case <-p.closing:
				return
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case <-p.closing:
			v.close()
			return
		default:
		}
		p.ready.push(v) // room was checked above, and gets only take
	}
}

// Stats reports how many evals found a prepared VM waiting.
func (p *Pool) Stats() (hits, misses uint64) { return p.hits.Load(), p.misses.Load() }

// Close stops the pool, closes its sessions (waiting for their running
// evals) and frees its ready VMs; other evals already running finish.
func (p *Pool) Close() {
	p.once.Do(func() {
		p.e.poolsMu.Lock()
		p.closed = true // no session starts from now on; those started are closed below
		var sessions []*Session
		for s := range p.e.sessions {
			if s.p == p {
				sessions = append(sessions, s)
			}
		}
		p.e.poolsMu.Unlock()
		for _, s := range sessions {
			s.Close()
		}
		close(p.closing)
		p.wg.Wait()
		if p.quiet != nil {
			p.quiet.Stop()
		}
		for v := p.ready.pop(); v != nil; v = p.ready.pop() {
			v.close()
		}
		p.idle.close()
		p.e.poolsMu.Lock()
		delete(p.e.pools, p)
		p.e.poolsMu.Unlock()
		p.scratch.close()
	})
}

// Session is one VM kept across evals, so the guest's variables, methods
// and loaded libraries persist. Evals on a session run one at a time. A
// VM that ends an eval any way but ok or error (a trap: timeout, fuel,
// memory, cancellation, tool budget, crash) is freed, and the next eval
// starts from a fresh one.
type Session struct {
	p      *Pool
	mu     sync.Mutex
	vm     *VM
	closed bool
}

// NewSession starts a session on p's engine, tools and mounts. Its VM is
// taken from the pool at its first eval. It fails with ErrClosed once p
// or its engine is closed.
func (p *Pool) NewSession() (*Session, error) {
	s := &Session{p: p}
	e := p.e
	e.poolsMu.Lock()
	defer e.poolsMu.Unlock()
	if e.closed.Load() || p.closed {
		return nil, ErrClosed
	}
	e.sessions[s] = true
	return s, nil
}

// Eval runs req in the session's VM. reset reports that the state the
// session had is gone: the VM trapped and was freed, or a mount's host
// directory had been replaced and the eval ran in a fresh VM.
func (s *Session) Eval(ctx context.Context, req *Request) (out *Outcome, reset bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	ran, replaced := false, false
	get := func() (*VM, error) {
		fresh, err := checkMounts(s.p.mounts)
		if err != nil {
			return nil, err
		}
		if s.vm != nil && !fresh(s.vm) {
			// A mount's host directory was replaced: the VM still has the
			// old one open. Start over on the new one, and say so.
			s.p.e.recycle(s.vm)
			s.vm, replaced = nil, true
		}
		if j := req.Journal; j != nil && j.CaptureBase {
			start := time.Now()
			j.CaptureBase, j.Base = false, []byte{stateVersion, 0} // a fresh VM's state
			if s.vm != nil {
				if j.Base, err = s.vm.capture(nil, nil); err != nil {
					j.Base, j.Overflow, j.Refused = nil, true, err.Error()
				}
			}
			j.CaptureTook = time.Since(start)
		}
		if s.vm == nil {
			v, err := s.p.get()
			if err != nil {
				return nil, err
			}
			s.vm = v
		}
		ran = true
		return s.vm, nil
	}
	keep := func(v *VM, out *Outcome) bool {
		if !kept(out) {
			return false
		}
		err := v.fs.wipeScratch(v.scratch)
		if err == nil {
			err = v.fs.emptyScratchFiles()
		}
		if err != nil {
			s.p.e.log.Warn("glovebox: wiping a session's scratch directory failed; dropping its VM", "err", err)
			v.abandoned.Store(true) // read below: the VM is gone
			return false
		}
		return true
	}
	out, err = s.p.e.eval(ctx, req, get, keep)
	if ran && (err != nil || !kept(out) || s.vm.abandoned.Load()) {
		s.vm = nil // freed by eval, or by its goroutine when it returns
		return out, true, err
	}
	return out, replaced, err
}

// kept reports whether a VM that ended an eval with out lives on: only
// when Ruby itself ended the eval (ok, or an exception that unwound
// through rescue and ensure). A trap reported as an error (the wasm stack
// exhausted: SystemStackError) skipped every ensure, so its VM goes.
func kept(out *Outcome) bool {
	return !out.Trapped && (out.Status == StatusOK || out.Status == StatusError)
}

// Close frees the session's VM. Later evals return ErrClosed.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.vm != nil {
		s.p.e.recycle(s.vm)
		s.vm = nil
	}
	s.p.e.poolsMu.Lock()
	delete(s.p.e.sessions, s)
	s.p.e.poolsMu.Unlock()
}

// vmStack holds a pool's prepared VMs, at most max, and hands out the one
// put last: with VMs rewound and prepared again after each eval (see
// rewind.go), the same few VMs keep serving, their pages warm in the
// caches, instead of every VM in turn (a queue made pooled evals 5-10%
// slower than evals that make their VM, measured with 10 ms gaps). A nil
// stack is empty and full.
type vmStack struct {
	mu  sync.Mutex
	vms []*VM
	max int
}

func (s *vmStack) push(v *VM) {
	s.mu.Lock()
	s.vms = append(s.vms, v)
	s.mu.Unlock()
}

// pop returns the VM pushed last, or nil.
func (s *vmStack) pop() *VM {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.vms)
	if n == 0 {
		return nil
	}
	v := s.vms[n-1]
	s.vms[n-1] = nil
	s.vms = s.vms[:n-1]
	return v
}

func (s *vmStack) len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.vms)
}

func (s *vmStack) full() bool { return s == nil || s.len() >= s.max }
