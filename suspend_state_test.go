package glovebox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// pausedState returns a small paused eval's state from r.
func pausedState(t testing.TB, r *glovebox.Runtime, code string) []byte {
	t.Helper()
	res := eval(t, r, code)
	wantStatus(t, res, glovebox.StatusSuspended)
	return res.State
}

// idleState returns a suspended session's state from r.
func idleState(t testing.TB, r *glovebox.Runtime, code string) []byte {
	t.Helper()
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Eval(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	st, err := s.Suspend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// refused checks that err is one of the typed refusals and that no VM
// was taken for it.
func refused(t testing.TB, r *glovebox.Runtime, before glovebox.Stats, err error, what string) {
	t.Helper()
	var sm *glovebox.StateMismatchError
	if err == nil || !(errors.Is(err, glovebox.ErrStateInvalid) || errors.Is(err, glovebox.ErrStateKey) || errors.As(err, &sm)) {
		t.Fatalf("%s: err %v, want a typed refusal", what, err)
	}
	if after := r.Stats(); after.PoolMisses != before.PoolMisses || after.PoolHits != before.PoolHits || after.VMsReused != before.VMsReused {
		t.Fatalf("%s: a VM was taken before the refusal (%+v, then %+v)", what, before, after)
	}
}

// TestStateDamageRefused: a state with any byte changed (header, body or
// tag), cut at any length, or empty, is refused with a typed error before
// any VM is taken for it.
func TestStateDamageRefused(t *testing.T) {
	ctx := context.Background()
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	paused := pausedState(t, r, `x = [1, "two"]; double(x.size)`)
	idle := idleState(t, r, `y = 7`)
	before := r.Stats()
	for i := range paused {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(paused)
			b[i] ^= mask
			_, err := r.Continue(ctx, b, glovebox.Answer{})
			refused(t, r, before, err, "paused state, byte "+itoa(int64(i))+" changed")
		}
	}
	for n := range len(paused) {
		_, err := r.Continue(ctx, paused[:n], glovebox.Answer{})
		refused(t, r, before, err, "paused state cut at "+itoa(int64(n)))
	}
	// The idle state is larger: every header byte, then a byte in every
	// 509, and the whole tag.
	for i := 0; i < len(idle); i++ {
		if i >= 64 && i < len(idle)-16 && i%509 != 0 {
			continue
		}
		b := bytes.Clone(idle)
		b[i] ^= 0x20
		_, err := r.ResumeSession(ctx, b)
		refused(t, r, before, err, "idle state, byte "+itoa(int64(i))+" changed")
		_, err = r.ResumeSession(ctx, idle[:i])
		refused(t, r, before, err, "idle state cut at "+itoa(int64(i)))
	}
	_, err := r.ResumeSession(ctx, append(bytes.Clone(idle), 0))
	refused(t, r, before, err, "idle state with a byte appended")
	// The format version is checked first and named.
	b := bytes.Clone(idle)
	b[4]++
	_, err = r.ResumeSession(ctx, b)
	var sm *glovebox.StateMismatchError
	if !errors.As(err, &sm) || sm.What != "format" {
		t.Fatalf("another format version: %v", err)
	}
	// Untouched, both still work.
	if _, err := r.Continue(ctx, paused, glovebox.Answer{Value: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := r.ResumeSession(ctx, idle)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestStateOtherRuntimeRefused: a state given to a Runtime with another
// keyring, other tools, mounts, limits or engine (fuel metering), or of
// the other kind, is refused with an error naming the difference.
func TestStateOtherRuntimeRefused(t *testing.T) {
	ctx := context.Background()
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	paused := pausedState(t, r, `double(2)`)
	idle := idleState(t, r, `z = 1`)

	other := newCorpusRuntime(t, true, glovebox.Config{StateKeys: testKeyring(t, "test-2")})
	defer other.Close()
	_, err := other.Continue(ctx, paused, glovebox.Answer{})
	if !errors.Is(err, glovebox.ErrStateKey) || !strings.Contains(err.Error(), `"test-1"`) {
		t.Fatalf("another key: %v", err)
	}
	if _, err := other.ResumeSession(ctx, idle); !errors.Is(err, glovebox.ErrStateKey) {
		t.Fatalf("another key: %v", err)
	}
	// A rotated ring (a new sealing key first) still opens the old key's
	// states, and seals with the new one.
	rotated := newCorpusRuntime(t, true, glovebox.Config{StateKeys: testKeyring(t, "test-2", "test-1")})
	defer rotated.Close()
	res, err := rotated.Continue(ctx, pausedState(t, r, `double(2) + double(3)`), glovebox.Answer{Value: 4})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusSuspended)
	if _, err := r.Continue(ctx, res.State, glovebox.Answer{Value: 6}); !errors.Is(err, glovebox.ErrStateKey) {
		t.Fatalf("a state sealed by the new key opened without it: %v", err)
	}
	if res, err := other.Continue(ctx, res.State, glovebox.Answer{Value: 6}); err != nil || res.Value != int64(10) {
		t.Fatalf("the new key's state: %v %+v", err, res)
	}

	var more glovebox.Toolset
	for _, n := range []string{"boom", "double", "echo", "extra", "lookup", "rows", "shout"} {
		fn := corpusTools[n]
		if fn == nil {
			fn = corpusTools["echo"]
		}
		more.Add(n, fn)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		what string
		r    func() (*glovebox.Runtime, error)
	}{
		{"tools", func() (*glovebox.Runtime, error) {
			return glovebox.New(ctx, glovebox.Config{Tools: &more, PoolSize: -1, StateKeys: testKeyring(t), Limits: corpusLimits})
		}},
		{"mounts", func() (*glovebox.Runtime, error) {
			return glovebox.New(ctx, glovebox.Config{Tools: corpusToolset(), PoolSize: -1, StateKeys: testKeyring(t), Limits: corpusLimits,
				Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/data"}}})
		}},
		{"limits", func() (*glovebox.Runtime, error) {
			return r.WithLimits(glovebox.Limits{Timeout: 7 * time.Second})
		}},
		{"image", func() (*glovebox.Runtime, error) {
			// Without a fuel budget the engine's code is not metered.
			return glovebox.New(ctx, glovebox.Config{Tools: corpusToolset(), PoolSize: -1, StateKeys: testKeyring(t)})
		}},
	} {
		rr, err := c.r()
		if err != nil {
			t.Fatal(err)
		}
		before := rr.Stats()
		var sm *glovebox.StateMismatchError
		for _, st := range [][]byte{paused, idle} { // CheckState tells without running
			if err := rr.CheckState(ctx, st); !errors.As(err, &sm) || sm.What != c.what {
				t.Fatalf("CheckState, %s: %v", c.what, err)
			}
		}
		_, err = rr.Continue(ctx, paused, glovebox.Answer{})
		if !errors.As(err, &sm) || sm.What != c.what || !errors.Is(err, glovebox.ErrStateMismatch) {
			t.Fatalf("%s: %v", c.what, err)
		}
		_, err = rr.ResumeSession(ctx, idle)
		if !errors.As(err, &sm) || sm.What != c.what {
			t.Fatalf("%s: %v", c.what, err)
		}
		refused(t, rr, before, err, c.what)
		if c.what == "limits" && (sm.State != "{Timeout:10s ToolTime:10s}" || sm.Runtime != "{Timeout:7s ToolTime:7s}") {
			t.Errorf("a limits mismatch names %s against %s, want only the fields that differ (the tool time follows the timeout)", sm.State, sm.Runtime)
		}
		if c.what != "limits" {
			rr.Close()
		}
	}
	for _, st := range [][]byte{paused, idle} {
		if err := r.CheckState(ctx, st); err != nil {
			t.Fatalf("CheckState of the runtime's own state: %v", err)
		}
	}
	if err := r.CheckState(ctx, paused[:len(paused)-1]); !errors.Is(err, glovebox.ErrStateInvalid) {
		t.Fatalf("CheckState of a truncated state: %v", err)
	}
	var sm *glovebox.StateMismatchError
	if _, err := r.Continue(ctx, idle, glovebox.Answer{}); !errors.As(err, &sm) || sm.What != "kind" {
		t.Fatalf("a session's state given to Continue: %v", err)
	}
	if _, err := r.ResumeSession(ctx, paused); !errors.As(err, &sm) || sm.What != "kind" {
		t.Fatalf("a paused eval's state given to ResumeSession: %v", err)
	}
}

// TestStateHidesGuestData: a canary the guest wrote, in a variable and in
// the eval's code, is not in the state's bytes.
func TestStateHidesGuestData(t *testing.T) {
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	const canary = "CANARY-7f3e1d"
	for _, st := range [][]byte{
		idleState(t, r, `$keep = "`+canary+`" * 1000; secret = "`+canary+`"`),
		pausedState(t, r, `s = "`+canary+`" * 100; puts s; double(s.size)`),
	} {
		for _, probe := range []string{canary, "CANARY", "7f3e1d"} {
			if bytes.Contains(st, []byte(probe)) {
				t.Fatalf("%q is visible in the state", probe)
			}
		}
	}
}

// TestStateStoreAtMostOnce: with a StateStore, a state continues once;
// the second attempt is refused with ErrStateUsed, in another Runtime
// sharing the store too.
func TestStateStoreAtMostOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := glovebox.NewDirStateStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := newCorpusRuntime(t, true, glovebox.Config{StateStore: store})
	defer r.Close()
	paused := pausedState(t, r, `double(5)`)
	id, err := glovebox.StateID(paused)
	if err != nil || len(id) != 32 {
		t.Fatalf("StateID: %q %v", id, err)
	}
	res, err := r.Continue(ctx, paused, glovebox.Answer{Value: 10})
	if err != nil || res.Value != int64(10) {
		t.Fatalf("%v %+v", err, res)
	}
	store2, _ := glovebox.NewDirStateStore(dir)
	r2 := newCorpusRuntime(t, true, glovebox.Config{StateStore: store2})
	defer r2.Close()
	if _, err := r2.Continue(ctx, paused, glovebox.Answer{Value: 10}); !errors.Is(err, glovebox.ErrStateUsed) {
		t.Fatalf("second continue: %v", err)
	}
	idle := idleState(t, r, `q = 1`)
	if _, err := r.ResumeSession(ctx, idle); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.ResumeSession(ctx, idle); !errors.Is(err, glovebox.ErrStateUsed) {
		t.Fatalf("second resume: %v", err)
	}
	// Without a store the caller may continue a state many times.
	free := newCorpusRuntime(t, true, glovebox.Config{})
	defer free.Close()
	p := pausedState(t, free, `double(1)`)
	for range 2 {
		if res, err := free.Continue(ctx, p, glovebox.Answer{Value: 2}); err != nil || res.Value != int64(2) {
			t.Fatalf("%v %+v", err, res)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("the store holds %d ids, want 2", len(ents))
	}
	if err := store.Claim(ctx, "../x"); !errors.Is(err, glovebox.ErrStateInvalid) {
		t.Fatalf("a bad id: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "x")); err == nil {
		t.Fatal("a claim escaped the store")
	}
}

// TestStateToolsMismatchNamesTools: a state refused for another tool set
// names the tools that differ: those the Runtime lacks, those it has
// beyond the state's, and those documented otherwise (here an approval
// added), not counts and a hash of all of them.
func TestStateToolsMismatchNamesTools(t *testing.T) {
	ctx := context.Background()
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	paused := pausedState(t, r, `double(2)`)
	var ts glovebox.Toolset
	for _, n := range []string{"double", "echo", "extra", "lookup", "rows", "shout"} { // no "boom"
		fn := corpusTools[n]
		if fn == nil {
			fn = corpusTools["echo"]
		}
		ts.Add(n, fn)
	}
	ts.RequireApproval("double")
	other, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, PoolSize: -1, StateKeys: testKeyring(t), Limits: corpusLimits})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, err := range []error{other.CheckState(ctx, paused), func() error { _, err := other.Continue(ctx, paused, glovebox.Answer{}); return err }()} {
		var sm *glovebox.StateMismatchError
		if !errors.As(err, &sm) || sm.What != "tools" {
			t.Fatalf("%v", err)
		}
		for _, want := range []string{"lacks boom", "also has extra", "differs for double"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q does not say %q", err, want)
			}
		}
		if !strings.HasPrefix(sm.State, "[boom:") || !strings.Contains(sm.State, " double:") || strings.Contains(sm.State, "echo") ||
			!strings.HasPrefix(sm.Runtime, "[double:") || !strings.Contains(sm.Runtime, " extra:") || strings.Contains(sm.Runtime, "echo") {
			t.Errorf("State %s, Runtime %s: want only the differing tools of each side", sm.State, sm.Runtime)
		}
	}
}
