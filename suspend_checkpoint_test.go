package glovebox_test

import (
	"context"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// TestCheckpointKeepsSessionOpen: Checkpoint seals the state and leaves
// the session usable; the bytes resume to the state at the checkpoint,
// not to what the live session did after it.
func TestCheckpointKeepsSessionOpen(t *testing.T) {
	ctx := context.Background()
	r, err := glovebox.New(ctx, glovebox.Config{StateKeys: testKeyring(t), PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if res, err := s.Eval(ctx, "$n = 41"); err != nil || res.Status != glovebox.StatusOK {
		t.Fatal(res, err)
	}
	state, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(ctx, "$n += 1"); err != nil || res.Value != int64(42) {
		t.Fatalf("the live session after Checkpoint: %v %v", res, err)
	}
	again, err := r.ResumeSession(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if res, err := again.Eval(ctx, "$n"); err != nil || res.Value != int64(41) {
		t.Fatalf("resumed from the checkpoint: %v %v", res, err)
	}
	other, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := glovebox.StateID(state)
	b, _ := glovebox.StateID(other)
	if a == b {
		t.Errorf("two checkpoints share the id %s", a)
	}
}
