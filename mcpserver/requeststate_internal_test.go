package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// sealedState returns a real sealed state: a fresh session's.
func sealedState(t *testing.T) []byte {
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
	s, err := rt.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Suspend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
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
	inline, err := b.seal(envelope{Kind: "call", Tool: "run_ruby"}, st, "")
	if err != nil {
		t.Fatal(err)
	}
	handle, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st, "")
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
	if first, _ := b.claim("ab12"); !first {
		t.Fatal("first claim refused")
	}
	if again, _ := b.claim("ab12"); again {
		t.Fatal("second claim taken")
	}
	b.max = 1
	b.counted = b.counted.AddDate(-1, 0, 0)
	if _, err := b.seal(envelope{Kind: "call", Tool: "run_ruby"}, st, ""); err == nil || !strings.Contains(err.Error(), "its limit") {
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
		handle, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st, "")
		if err != nil {
			t.Fatal(err)
		}
		e, _, err := b.open(handle, "session", ToolSession, "")
		if err != nil {
			t.Fatal(err)
		}
		if first, _ := b.claim(e.ID); !first {
			t.Fatal("claim refused")
		}
		if err := b.record(e.ID, []byte(`{"content":[]}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.read("states", e.ID); err == nil {
			t.Fatalf("dir %q: the continued handle's state is still stored", dir)
		}
		if _, _, err := b.open(handle, "session", ToolSession, ""); err != nil {
			t.Fatalf("dir %q: a replay of a continued handle: %v", dir, err)
		}
		// A stored state that is gone, with no outcome: refused, and a
		// load after the claim gives the claim back.
		other, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st2, "")
		if err != nil {
			t.Fatal(err)
		}
		oe, _, err := b.open(other, "session", ToolSession, "")
		if err != nil {
			t.Fatal(err)
		}
		b.claim(oe.ID)
		if dir != "" {
			os.Remove(filepath.Join(dir, "states", oe.ID))
		} else {
			delete(b.mem, "states/"+oe.ID)
		}
		if _, err := b.load(oe); err == nil || !strings.Contains(err.Error(), "not in the state directory") {
			t.Fatalf("dir %q: load of a state gone: %v", dir, err)
		}
		if first, _ := b.claim(oe.ID); !first {
			t.Fatalf("dir %q: the claim of a state that could not be read was kept", dir)
		}
		if _, _, err := b.open(other, "session", ToolSession, ""); err == nil {
			t.Fatalf("dir %q: open of a handle whose state is gone", dir)
		}
		if o, ok := b.outcome(e.ID); !ok || string(o) != `{"content":[]}` {
			t.Fatalf("dir %q: outcome %q %v", dir, o, ok)
		}
		b.maxBytes = int64(len(st))
		if _, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st, ""); err != nil {
			t.Fatalf("dir %q: under the byte cap: %v", dir, err)
		}
		b.counted = b.counted.AddDate(-1, 0, 0)
		if _, err := b.seal(envelope{Kind: "session", Tool: ToolSession}, st, ""); err == nil || !strings.Contains(err.Error(), "its limit") {
			t.Fatalf("dir %q: past the byte cap: %v", dir, err)
		}
	}
}
