package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// sealedState returns a real sealed state: a fresh session's.
func sealedState(t *testing.T) []byte { return sealedStates(t, 1)[0] }

// sealedStates returns n real sealed states, each with its own id.
func sealedStates(t *testing.T, n int) [][]byte {
	t.Helper()
	k, err := glovebox.NewKeyring(glovebox.StateKey{ID: "t", Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := glovebox.New(context.Background(), glovebox.Config{StateKeys: k, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	var out [][]byte
	for range n {
		s, err := rt.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Suspend(context.Background())
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

// The state book: a small state travels inline, a large one (and every
// session handle) by reference into the directory; a state opens only for
// its own kind and tool and only with its own key; a claim is taken once;
// past the record cap a state is refused with the limit named.
func TestStateBook(t *testing.T) {
	st := sealedState(t)
	key := make([]byte, 32)
	dir := t.TempDir()
	b, err := newStateBook(Options{StateKey: key, StateDir: dir, MaxInlineState: len(st)})
	if err != nil {
		t.Fatal(err)
	}
	inline, err := b.seal(envelope{Kind: "call", Tool: "run_ruby"}, st, "", "")
	if err != nil {
		t.Fatal(err)
	}
	handle, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(handle) >= len(inline) || len(handle) > 400 {
		t.Fatalf("handle %d bytes, inline state %d", len(handle), len(inline))
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "states")); len(ents) != 1 {
		t.Fatalf("states stored: %d, want 1 (the handle's)", len(ents))
	}
	for _, s := range []string{inline, handle} {
		kind, tool := "call", "run_ruby"
		if s == handle {
			kind, tool = "session", ToolSession
		}
		e, got, err := b.open(s, kind, tool, "")
		if err != nil || e.ID == "" || (s == inline) != (got != nil) {
			t.Fatalf("open %s: %v (a stored state is read only by load)", kind, err)
		}
		if got, err = b.load(e); err != nil || string(got) != string(st) {
			t.Fatalf("load %s: %v", kind, err)
		}
	}
	if _, _, err := b.open(inline, "call", "other_tool", ""); err == nil || !strings.Contains(err.Error(), "belongs to run_ruby") {
		t.Fatalf("another tool's: %v", err)
	}
	other, _ := newStateBook(Options{StateKey: append(make([]byte, 31), 1), StateDir: dir})
	if _, _, err := other.open(inline, "call", "run_ruby", ""); err == nil || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("another key's: %v", err)
	}
	ce := &envelope{ID: "ab12", Owner: b.ownerTag(""), Kind: "call"}
	if first, _ := b.claim(ce); !first {
		t.Fatal("first claim refused")
	}
	if again, _ := b.claim(ce); again {
		t.Fatal("second claim taken")
	}
	// Past the record cap the session handle's state is dropped for a
	// paused call's (its handle then expired early); a paused call's is
	// never dropped, so the next is refused.
	b.max, b.maxClient = 1, 1
	b.listed = time.Time{}
	b.maxInline = 0
	if _, err := b.seal(envelope{Kind: "call", Tool: "run_ruby"}, st, "", ""); err != nil {
		t.Fatalf("a paused call's state in place of a session handle's: %v", err)
	}
	if _, _, err := b.open(handle, "session", ToolSession, ""); err == nil || !strings.Contains(err.Error(), "expired early") {
		t.Fatalf("the handle whose state was dropped: %v", err)
	}
	if _, err := b.seal(envelope{Kind: "call", Tool: "run_ruby"}, st, "", ""); err == nil || !strings.Contains(err.Error(), "its share") {
		t.Fatalf("past the cap: %v", err)
	}
}

// A session handle's state is as large as the VM's changed memory (up to
// the memory limit): once its outcome is recorded the stored state is
// deleted, a replay still gets the outcome, and past the byte cap a state
// is refused, so a client cannot fill the disk (or, without a directory,
// the memory) with hundreds of MiB per call.
func TestStateBookBytes(t *testing.T) {
	st, st2 := sealedState(t), sealedState(t)
	for _, dir := range []string{t.TempDir(), ""} {
		b, err := newStateBook(Options{StateKey: make([]byte, 32), StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		handle, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st, "", "")
		if err != nil {
			t.Fatal(err)
		}
		e, _, err := b.open(handle, "session", ToolSession, "")
		if err != nil {
			t.Fatal(err)
		}
		if first, _ := b.claim(e); !first {
			t.Fatal("claim refused")
		}
		if err := b.record(e, []byte(`{"content":[]}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.read("states", e); err == nil {
			t.Fatalf("dir %q: the continued handle's state is still stored", dir)
		}
		if _, _, err := b.open(handle, "session", ToolSession, ""); err != nil {
			t.Fatalf("dir %q: a replay of a continued handle: %v", dir, err)
		}
		// A stored state that is gone, with no outcome: refused, and a
		// load after the claim gives the claim back.
		other, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st2, "", "")
		if err != nil {
			t.Fatal(err)
		}
		oe, _, err := b.open(other, "session", ToolSession, "")
		if err != nil {
			t.Fatal(err)
		}
		b.claim(oe)
		if dir != "" {
			os.Remove(filepath.Join(dir, "states", fileName(oe)))
		} else {
			delete(b.mem, "states/"+fileName(oe))
		}
		if _, err := b.load(oe); err == nil || !strings.Contains(err.Error(), "not in the state directory") {
			t.Fatalf("dir %q: load of a state gone: %v", dir, err)
		}
		if first, _ := b.claim(oe); !first {
			t.Fatalf("dir %q: the claim of a state that could not be read was kept", dir)
		}
		if _, _, err := b.open(other, "session", ToolSession, ""); err == nil {
			t.Fatalf("dir %q: open of a handle whose state is gone", dir)
		}
		if o, ok := b.outcome(e); !ok || string(o) != `{"content":[]}` {
			t.Fatalf("dir %q: outcome %q %v", dir, o, ok)
		}
		// Past the byte cap, a paused call's state (which is never
		// dropped: it waits for a person) is refused.
		b.maxBytes, b.maxClientBytes, b.maxInline = 2*int64(len(st))-1, 2*int64(len(st))-1, 0
		b.listed = time.Time{}
		if _, err := b.seal(envelope{Kind: "call", Tool: ToolRun}, st, "", ""); err != nil {
			t.Fatalf("dir %q: under the byte cap: %v", dir, err)
		}
		if _, err := b.seal(envelope{Kind: "call", Tool: ToolRun}, st, "", ""); err == nil || !strings.Contains(err.Error(), "its share") {
			t.Fatalf("dir %q: past the byte cap: %v", dir, err)
		}
	}
}

// One client cannot fill the state directory for everyone: past its
// share, its own oldest session handles are dropped (refused as expired
// early; its newest work), the whole stays under its bounds, and another
// client still gets a handle. A client whose share is all paused calls
// (never dropped) is refused, saying when its oldest expires.
func TestStateBookClientShare(t *testing.T) {
	sts := sealedStates(t, 45)
	st := sts[0]
	size := int64(len(st)) + 64 // states differ a little in size
	for _, dir := range []string{t.TempDir(), ""} {
		b, err := newStateBook(Options{StateKey: make([]byte, 32), StateDir: dir, MaxStateBytes: 8 * size, MaxClientStateBytes: 2 * size, MaxInlineState: -1})
		if err != nil {
			t.Fatal(err)
		}
		b.maxInline = 0
		var handles []string
		for i := range 41 {
			h, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, sts[i], "", "addr:192.0.2.1")
			if err != nil {
				t.Fatalf("dir %q: mallory's handle %d: %v", dir, i, err)
			}
			handles = append(handles, h)
			b.mu.Lock()
			recs := b.list(time.Now())
			b.mu.Unlock()
			var n int64
			for _, r := range recs {
				if r.counted() {
					n += r.size
				}
			}
			if n > 2*size {
				t.Fatalf("dir %q: after handle %d the directory holds %d bytes, over the client's share of %d", dir, i, n, 2*size)
			}
		}
		if _, _, err := b.open(handles[0], "session", ToolSession, ""); err == nil || !strings.Contains(err.Error(), "expired early") {
			t.Fatalf("dir %q: mallory's first handle: %v", dir, err)
		}
		if _, _, err := b.open(handles[40], "session", ToolSession, ""); err != nil {
			t.Fatalf("dir %q: mallory's newest handle: %v", dir, err)
		}
		if _, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, sts[41], "", "addr:198.51.100.7"); err != nil {
			t.Fatalf("dir %q: another client's handle: %v", dir, err)
		}
		for i := range 2 {
			if _, err := b.seal(envelope{Kind: "call", Tool: ToolRun}, sts[42+i], "alice", "user:alice"); err != nil {
				t.Fatalf("dir %q: alice's paused call %d: %v", dir, i, err)
			}
		}
		_, err = b.seal(envelope{Kind: "call", Tool: ToolRun}, sts[44], "alice", "user:alice")
		if err == nil || !strings.Contains(err.Error(), "its share") || !strings.Contains(err.Error(), "expires in") {
			t.Fatalf("dir %q: alice's third paused call, over her share: %v", dir, err)
		}
	}
}

// The time a refusal names is the time the room is there: the oldest
// record goes once its TTL has passed, and a call made then fits.
func TestStateBookRefusalTimeIsTrue(t *testing.T) {
	sts := sealedStates(t, 3)
	for _, dir := range []string{t.TempDir(), ""} {
		b, err := newStateBook(Options{StateKey: make([]byte, 32), StateDir: dir, StateTTL: 2 * time.Second, MaxStateBytes: int64(len(sts[0])) + 64, MaxClientStateBytes: int64(len(sts[0])) + 64, MaxInlineState: -1})
		if err != nil {
			t.Fatal(err)
		}
		b.maxInline = 0
		if _, err := b.seal(envelope{Kind: "call", Tool: ToolRun}, sts[0], "", ""); err != nil {
			t.Fatal(err)
		}
		_, err = b.seal(envelope{Kind: "call", Tool: ToolRun}, sts[1], "", "")
		m := regexp.MustCompile(`expires in (\S+) \(`).FindStringSubmatch(fmt.Sprint(err))
		if m == nil {
			t.Fatalf("dir %q: the refusal names no time: %v", dir, err)
		}
		wait, err := time.ParseDuration(m[1])
		if err != nil || wait > 3*time.Second {
			t.Fatalf("dir %q: the refusal's time %q (TTL 2s): %v", dir, m[1], err)
		}
		time.Sleep(wait)
		if _, err := b.seal(envelope{Kind: "call", Tool: ToolRun}, sts[2], "", ""); err != nil {
			t.Fatalf("dir %q: at the time the refusal named (%v): %v", dir, wait, err)
		}
	}
}
