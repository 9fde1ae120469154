package glovebox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// TestStateBinding: a state bound to a label checks against that label
// only, under any ring holding its key, and not against another label,
// another state, a ring without the key or bytes that are not a state.
func TestStateBinding(t *testing.T) {
	k := testKeyring(t)
	rt, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, StateKeys: k})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	s, err := rt.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st1, err := s.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := s.Checkpoint(context.Background())
	tag, err := k.BindState(st1, "a/s-1/1")
	if err != nil || len(tag) != 32 {
		t.Fatalf("BindState: %x %v", tag, err)
	}
	if err := k.CheckState(st1, "a/s-1/1", tag); err != nil {
		t.Errorf("the state's own binding: %v", err)
	}
	if err := testKeyring(t, "test-2", "test-1").CheckState(st1, "a/s-1/1", tag); err != nil {
		t.Errorf("a rotated ring holding the key: %v", err)
	}
	for what, err := range map[string]error{
		"another label":  k.CheckState(st1, "b/s-1/1", tag),
		"another state":  k.CheckState(st2, "a/s-1/1", tag),
		"a cut tag":      k.CheckState(st1, "a/s-1/1", tag[:31]),
		"not a state":    k.CheckState([]byte("GBst nonsense"), "a/s-1/1", tag),
		"a ring without": testKeyring(t, "test-2").CheckState(st1, "a/s-1/1", tag),
		"a nil keyring":  (*glovebox.Keyring)(nil).CheckState(st1, "a/s-1/1", tag),
	} {
		if !errors.Is(err, glovebox.ErrStateInvalid) && !errors.Is(err, glovebox.ErrStateKey) && !errors.Is(err, glovebox.ErrStateMismatch) {
			t.Errorf("%s: %v, want ErrStateInvalid, ErrStateKey or ErrStateMismatch", what, err)
		}
	}
}
