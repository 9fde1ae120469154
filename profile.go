package glovebox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Errors about named profiles.
var (
	// ErrProfileExists is returned when registering a name already taken.
	ErrProfileExists = errors.New("glovebox: profile already registered")
	// ErrUnknownProfile is returned for a name never registered.
	ErrUnknownProfile = errors.New("glovebox: no such profile")
)

// Clone returns a deep copy of c: its own Mounts slice and its own copy of
// the Toolset, so changing the copy never changes c. Hooks, Logger and
// Progress are functions and are shared.
func (c Config) Clone() Config {
	out := c
	out.Mounts = slices.Clone(c.Mounts)
	if c.Tools != nil {
		ts := &Toolset{}
		ts.Merge(c.Tools) // cannot fail: ts is empty
		out.Tools = ts
	}
	return out
}

// Fingerprint returns a stable identifier of what c lets a guest do: the
// hex SHA-256 of its limits (defaults filled in, so a zero field and its
// default match), its mounts (host path, guest path, access and
// description, in order), its tool names and its ImagePath (as written:
// an image chosen by $GLOVEBOX_IMAGE is not seen). Equal settings give
// equal fingerprints in every process and version of this package that
// encodes them the same way; the tools' functions, hooks, the cache and
// scratch directories, the pool size, the logger and Progress are not
// part of it.
func (c Config) Fingerprint() string {
	l, err := c.Limits.withDefaults(0)
	if err != nil {
		l = c.Limits // invalid limits still fingerprint, as given
	}
	var tools []string
	if c.Tools != nil {
		tools = c.Tools.Names()
	}
	b, _ := json.Marshal(struct {
		V      int
		Limits Limits
		Mounts []Mount
		Tools  []string
		Image  string `json:",omitempty"`
	}{1, l, c.Mounts, tools, c.ImagePath})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Profiles is a registry of named configurations: define each once
// (limits, mounts, tools), derive variants from them, and start Runtimes
// by name. A registered profile never changes: Register and Derive store
// a deep copy, and Get hands out a deep copy. The zero value is an empty
// registry ready to use; it is safe for concurrent use.
type Profiles struct {
	mu sync.RWMutex
	m  map[string]Config
}

// Register adds cfg under name. It fails with ErrProfileExists for a
// taken name, ErrInvalidLimits or ErrInvalidMount for a bad cfg, and an
// error for an empty name.
func (p *Profiles) Register(name string, cfg Config) error {
	if name == "" {
		return errors.New("glovebox: a profile needs a name")
	}
	if _, err := cfg.Limits.withDefaults(0); err != nil {
		return fmt.Errorf("profile %q: %w", name, err)
	}
	if err := validateMounts(cfg.Mounts); err != nil {
		return fmt.Errorf("profile %q: %w", name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.m[name]; ok {
		return fmt.Errorf("%w: %q", ErrProfileExists, name)
	}
	if p.m == nil {
		p.m = map[string]Config{}
	}
	p.m[name] = cfg.Clone()
	return nil
}

// Derive registers name as a copy of the profile base changed by change,
// which receives a deep copy (base itself never changes). It fails as
// Register does, and with ErrUnknownProfile when base is not registered.
func (p *Profiles) Derive(name, base string, change func(*Config)) error {
	cfg, err := p.Get(base)
	if err != nil {
		return err
	}
	if change != nil {
		change(&cfg)
	}
	return p.Register(name, cfg)
}

// Get returns a deep copy of the profile name, or ErrUnknownProfile.
func (p *Profiles) Get(name string) (Config, error) {
	p.mu.RLock()
	cfg, ok := p.m[name]
	p.mu.RUnlock()
	if !ok {
		return Config{}, fmt.Errorf("%w: %q (registered: %v)", ErrUnknownProfile, name, p.Names())
	}
	return cfg.Clone(), nil
}

// Names returns the registered names, sorted.
func (p *Profiles) Names() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	names := make([]string, 0, len(p.m))
	for n := range p.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New starts a Runtime from the profile name (see New for what that
// costs and how it fails), or returns ErrUnknownProfile.
func (p *Profiles) New(ctx context.Context, name string) (*Runtime, error) {
	cfg, err := p.Get(name)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg)
}
