package glovebox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	var ts glovebox.Toolset
	must(t, ts.Func("orders", func() []string { return []string{"a"} }))
	base := glovebox.Config{
		Limits: glovebox.Limits{Timeout: 2 * time.Second},
		Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/data"}},
		Tools:  &ts,
	}
	var p glovebox.Profiles
	must(t, p.Register("analyst", base))
	fp := base.Fingerprint()

	// Changing the caller's copy after registering changes nothing.
	base.Mounts[0].Writable = true
	must(t, ts.Func("refund", func() {}))
	got, err := p.Get("analyst")
	must(t, err)
	if got.Mounts[0].Writable || len(got.Tools.Names()) != 1 || got.Fingerprint() != fp {
		t.Fatalf("the registered profile changed: %+v %v", got.Mounts, got.Tools.Names())
	}
	// Nor does changing what Get returned.
	got.Limits.Timeout = time.Minute
	got.Mounts[0].GuestPath = "/other"
	if again, _ := p.Get("analyst"); again.Fingerprint() != fp {
		t.Fatal("Get handed out the profile itself")
	}

	// Derive: the variant differs, the base does not.
	must(t, p.Derive("analyst-rw", "analyst", func(c *glovebox.Config) {
		c.Mounts[0].Writable = true
		c.Limits.Fuel = 1e9
	}))
	rw, _ := p.Get("analyst-rw")
	if rw.Fingerprint() == fp || !rw.Mounts[0].Writable {
		t.Fatal("the derived profile is not different")
	}
	if a, _ := p.Get("analyst"); a.Mounts[0].Writable || a.Fingerprint() != fp {
		t.Fatal("deriving changed the base")
	}

	// Fingerprints: equal settings are equal, defaults included.
	a := glovebox.Config{Limits: glovebox.Limits{Timeout: glovebox.DefaultTimeout}}
	b := glovebox.Config{PoolSize: 3}
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatal("a default written out changed the fingerprint")
	}
	if a.Fingerprint() == (glovebox.Config{Limits: glovebox.Limits{Timeout: time.Second}}).Fingerprint() {
		t.Fatal("different limits share a fingerprint")
	}

	// Errors.
	if err := p.Register("analyst", base); !errors.Is(err, glovebox.ErrProfileExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := p.Derive("x", "nope", nil); !errors.Is(err, glovebox.ErrUnknownProfile) {
		t.Fatalf("unknown base: %v", err)
	}
	if _, err := p.New(context.Background(), "nope"); !errors.Is(err, glovebox.ErrUnknownProfile) {
		t.Fatalf("unknown name: %v", err)
	}
	if err := p.Register("bad", glovebox.Config{Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "rel"}}}); !errors.Is(err, glovebox.ErrInvalidMount) {
		t.Fatalf("bad mount: %v", err)
	}

	// Spawn by name; a per-call override leaves the profile alone.
	r, err := p.New(context.Background(), "analyst")
	must(t, err)
	defer r.Close()
	res := eval(t, r, `[orders, Dir.exist?("/data")]`)
	wantStatus(t, res, glovebox.StatusOK)
	fast, err := r.WithLimits(glovebox.Limits{Timeout: 100 * time.Millisecond})
	must(t, err)
	wantStatus(t, eval(t, fast, `sleep 1`), glovebox.StatusTimeout)
	if r.Limits().Timeout != 2*time.Second {
		t.Fatal("WithLimits changed the Runtime")
	}
	// An override changes only what it sets.
	strict, err := r.WithLimits(glovebox.Limits{Fuel: 50_000_000, ToolCalls: 3})
	must(t, err)
	faster, err := strict.WithLimits(glovebox.Limits{Timeout: time.Second})
	must(t, err)
	if l := faster.Limits(); l.Fuel != 50_000_000 || l.ToolCalls != 3 || l.Timeout != time.Second || l.ToolTime != time.Second {
		t.Fatalf("override dropped limits it did not set: %+v", l)
	}
	if a, _ := p.Get("analyst"); a.Fingerprint() != fp {
		t.Fatal("running changed the profile")
	}
}

// A registered profile cannot be changed through anything the caller
// kept: the Config it registered, the pointer Derive's change received,
// the Toolset, or a Runtime made from it.
func TestAttackProfileAliasing(t *testing.T) {
	dir := t.TempDir()
	var ts glovebox.Toolset
	must(t, ts.Func("orders", func() int { return 1 }))
	cfg := glovebox.Config{Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/data"}}, Tools: &ts, PoolSize: -1}
	var p glovebox.Profiles
	must(t, p.Register("a", cfg))
	fp := cfg.Fingerprint()
	var kept *glovebox.Config
	must(t, p.Derive("b", "a", func(c *glovebox.Config) { kept = c }))
	cfg.Mounts[0].Writable = true
	cfg.Mounts = append(cfg.Mounts[:1], glovebox.Mount{HostPath: "/", GuestPath: "/host", Writable: true})
	must(t, ts.Func("drop_tables", func() int { return 0 }))
	kept.Mounts[0].Writable = true
	must(t, kept.Tools.Func("drop_tables", func() int { return 0 }))
	kept.Limits.Timeout = time.Hour
	r, err := p.New(context.Background(), "a")
	must(t, err)
	defer r.Close()
	got, _ := p.Get("a")
	got.Mounts[0].Writable = true
	got.Tools.Func("more", func() int { return 0 })
	for _, name := range []string{"a", "b"} {
		c, _ := p.Get(name)
		if c.Fingerprint() != fp || c.Mounts[0].Writable || len(c.Mounts) != 1 || len(c.Tools.Names()) != 1 {
			t.Errorf("profile %s changed: %+v %v", name, c.Mounts, c.Tools.Names())
		}
	}
	res := eval(t, r, attempt(`File.write("/data/x", "1")`))
	if s, _ := res.Value.(string); !strings.HasPrefix(s, "Errno::") {
		t.Errorf("the profile's read-only mount took a write: %v", res.Value)
	}
}
