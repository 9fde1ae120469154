package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Pool keeps VMs ready for evals, each already prepared — reseeded, with a
// given set of tools defined, and warmed — so an eval does not wait for
// one to be made. Every VM still runs exactly one eval. A Pool is safe for
// concurrent use.
type Pool struct {
	e       *Engine
	tools   []string
	ready   chan *VM
	closing chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	hits    atomic.Uint64
	misses  atomic.Uint64
}

// NewPool starts a pool of size VMs prepared with tools (0 keeps none
// ready: each eval makes its VM).
func (e *Engine) NewPool(size int, tools []string) *Pool {
	p := &Pool{e: e, tools: append([]string(nil), tools...), closing: make(chan struct{})}
	if size > 0 {
		p.ready = make(chan *VM, size)
		p.wg.Add(1)
		go p.fill()
	}
	e.poolsMu.Lock()
	e.pools[p] = true
	e.poolsMu.Unlock()
	return p
}

// Eval runs req (whose Tools must be the pool's) in a fresh VM.
func (p *Pool) Eval(ctx context.Context, req *Request) (*Outcome, error) {
	return p.e.eval(ctx, req, p.get)
}

func (p *Pool) get() (*VM, error) {
	select {
	case v := <-p.ready:
		if v != nil {
			p.hits.Add(1)
			return v, nil
		}
	default:
	}
	p.misses.Add(1)
	return p.e.prepared(p.tools)
}

// fill keeps the pool full.
func (p *Pool) fill() {
	defer p.wg.Done()
	for {
		v, err := p.e.prepared(p.tools)
		if err != nil {
			p.e.log.Warn("glovebox: preparing a pooled VM failed", "err", err)
			select {
			case <-p.closing:
				return
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case p.ready <- v:
		case <-p.closing:
			v.close()
			return
		}
	}
}

// Stats reports how many evals found a prepared VM waiting.
func (p *Pool) Stats() (hits, misses uint64) { return p.hits.Load(), p.misses.Load() }

// Close stops the pool and frees its ready VMs; evals already running
// finish.
func (p *Pool) Close() {
	p.once.Do(func() {
		close(p.closing)
		p.wg.Wait()
		for p.ready != nil {
			select {
			case v := <-p.ready:
				v.close()
				continue
			default:
			}
			break
		}
		p.e.poolsMu.Lock()
		delete(p.e.pools, p)
		p.e.poolsMu.Unlock()
	})
}
