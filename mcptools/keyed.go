package mcptools

import (
	"context"
	"fmt"
	"sync"

	"github.com/gloveboxhq/glovebox"
)

// Keyed describes a per-user binding: one Toolset and one Runtime for all
// users, and behind each bound tool one server process per key (a user),
// started with that user's credentials on the user's first call. The host
// puts the key in the context it passes to Eval; see [BindKeyed].
type Keyed struct {
	// Key returns the key of the eval a call belongs to, read from the
	// context the host passed to Eval (context values reach tool
	// calls). ok false fails the call with MCPTransportError.
	Key func(ctx context.Context) (key string, ok bool)
	// Server returns the server to start for key: the same Name and the
	// same tools for every key, with that key's Env, Header or Command.
	Server func(key string) (Server, error)
	// Probe is the key whose server Bind starts to list the tools; it
	// stays running as that key's server.
	Probe string
}

// keyed is a Binding's per-key servers.
type keyed struct {
	k      Keyed
	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
}

// BindKeyed is [Bind] for one per-user server (see [Keyed]): the tools are
// listed from the Probe key's server, and each call goes to the server of
// the key k.Key finds in its context, started on first use and restarted
// like any other. [Binding.Drop] stops one key's server; Close stops them
// all. Servers of keys that are never dropped run until Close.
func BindKeyed(ctx context.Context, ts *glovebox.Toolset, cfg Config, k Keyed) (*Binding, error) {
	if k.Key == nil || k.Server == nil {
		return nil, fmt.Errorf("%w: Keyed needs Key and Server", ErrBind)
	}
	s, err := k.Server(k.Probe)
	if err != nil {
		return nil, fmt.Errorf("%w: the probe key's server: %v", ErrBind, err)
	}
	var staged glovebox.Toolset
	b, err := Bind(ctx, &staged, cfg, s)
	if err != nil {
		return nil, err
	}
	b.keyed = &keyed{k: k, conns: map[string]*conn{k.Probe: b.servers[0]}}
	for _, n := range ts.Names() {
		if b.names[n] != "" {
			b.Close()
			return nil, fmt.Errorf("%w: %q is already in the Toolset (a keyed server's tools are not renamed)", ErrBind, n)
		}
	}
	if err := ts.Merge(&staged); err != nil {
		b.Close()
		return nil, fmt.Errorf("%w: %v", ErrBind, err)
	}
	return b, nil
}

// target returns the conn a call goes to.
func (t *tool) target(ctx context.Context) (*conn, error) {
	kd := t.c.b.keyed
	if kd == nil {
		return t.c, nil
	}
	key, ok := kd.k.Key(ctx)
	if !ok {
		return nil, fmt.Errorf("the eval's context carries no key for server %q", t.c.srv.Name)
	}
	kd.mu.Lock()
	defer kd.mu.Unlock()
	if kd.closed {
		return nil, errClosed
	}
	if c, ok := kd.conns[key]; ok {
		return c, nil
	}
	s, err := kd.k.Server(key)
	if err != nil {
		return nil, fmt.Errorf("no server for this key: %v", err)
	}
	if err := s.checkEnv(); err != nil {
		return nil, fmt.Errorf("the key's server: %v", err)
	}
	if err := s.checkAuth(); err != nil {
		return nil, fmt.Errorf("the key's server: %v", err)
	}
	if s.Name != t.c.srv.Name {
		return nil, fmt.Errorf("the key's server is named %q, not %q", s.Name, t.c.srv.Name)
	}
	c := &conn{b: t.c.b, srv: s, backoff: t.c.b.cfg.RestartBackoff, dead: true, scrub: newScrubber(s)}
	kd.conns[key] = c
	return c, nil
}

// Drop stops the server of key in a binding made by [BindKeyed]; its next
// call starts a new one. It returns whether key had a server.
func (b *Binding) Drop(key string) bool {
	kd := b.keyed
	if kd == nil {
		return false
	}
	kd.mu.Lock()
	c, ok := kd.conns[key]
	delete(kd.conns, key)
	kd.mu.Unlock()
	if ok {
		c.close()
	}
	return ok
}

func (kd *keyed) close() {
	kd.mu.Lock()
	kd.closed = true
	conns := kd.conns
	kd.conns = nil
	kd.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}
