package glovebox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// dataFrames lists a sealed state's data frames (length and sealed
// bytes), after its index.
func dataFrames(t *testing.T, st []byte) [][]byte {
	t.Helper()
	h, err := parseHeader(st)
	if err != nil {
		t.Fatal(err)
	}
	at := h.n + 4 + int(binary.LittleEndian.Uint32(st[h.n:]))
	var out [][]byte
	for at < len(st) {
		m := int(binary.LittleEndian.Uint32(st[at:]) &^ frameStored)
		out = append(out, st[at:at+4+m])
		at += 4 + m
	}
	return out
}

// sameFrames counts the frames of b that are byte for byte one of a's.
func sameFrames(a, b [][]byte) int {
	n, _ := countSame(a, b, func([]byte) int { return 1 })
	return n
}

// sameBytes counts the bytes of b's frames that are one of a's, of all.
func sameBytes(a, b [][]byte) (same, all int) {
	return countSame(a, b, func(f []byte) int { return len(f) })
}

func countSame(a, b [][]byte, size func([]byte) int) (same, all int) {
	seen := map[string]bool{}
	for _, f := range a {
		seen[string(f)] = true
	}
	for _, f := range b {
		all += size(f)
		if seen[string(f)] {
			same += size(f)
		}
	}
	return same, all
}

// TestCheckpointReusesFrames: a resumed session sealed again reuses the
// sealed bytes of every frame that did not change (all of them when no
// eval ran, nine tenths of the bytes and more after an eval that changed
// a variable), and the state it makes resumes to what the session held; another sealing
// key reuses nothing; a frame spliced in from another state is refused.
func TestCheckpointReusesFrames(t *testing.T) {
	ctx := context.Background()
	keys, _ := NewKeyring(StateKey{ID: "k", Secret: bytes.Repeat([]byte{7}, 32)})
	r, err := New(ctx, Config{StateKeys: keys, PoolSize: 1, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	idle := func(code string) []byte {
		s, _ := r.NewSession()
		if res, err := s.Eval(ctx, code); err != nil || res.Status != StatusOK {
			t.Fatal(err, res)
		}
		st, err := s.Suspend(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st1 := idle(`$h = Random.new(1).bytes(1 << 19).unpack1("H*"); x = 1`)
	f1 := dataFrames(t, st1)
	if len(f1) < 6 {
		t.Fatalf("%d frames", len(f1))
	}
	s, err := r.ResumeSession(ctx, st1)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f2 := dataFrames(t, st2); len(f2) != len(f1) || sameFrames(f1, f2) != len(f1) || bytes.Equal(st1[:60], st2[:60]) {
		t.Fatalf("no eval since the resume: %d of %d frames reused, want all (in a state of its own)", sameFrames(f1, f2), len(f1))
	}
	if res, err := s.Eval(ctx, `x = 2`); err != nil || res.Status != StatusOK {
		t.Fatal(err, res)
	}
	st3, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	f3 := dataFrames(t, st3)
	if same, all := sameBytes(f1, f3); same < all*9/10 || same == all {
		t.Fatalf("after x = 2: %d of %d sealed bytes reused, want nine tenths or more, not all", same, all)
	}
	s, err = r.ResumeSession(ctx, st3)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(ctx, `[x, $h.size, $h == Random.new(1).bytes(1 << 19).unpack1("H*")]`); err != nil || fmt.Sprint(res.Value) != "[2 1048576 true]" {
		t.Fatalf("resumed: %v %+v", err, res)
	}
	s.Close()

	rotated, _ := NewKeyring(StateKey{ID: "k2", Secret: bytes.Repeat([]byte{9}, 32)}, StateKey{ID: "k", Secret: bytes.Repeat([]byte{7}, 32)})
	r2, err := New(ctx, Config{StateKeys: rotated, PoolSize: 1, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	s, err = r2.ResumeSession(ctx, st3)
	if err != nil {
		t.Fatal(err)
	}
	st4, err := s.Suspend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if same := sameFrames(f3, dataFrames(t, st4)); same != 0 {
		t.Fatalf("sealed with a new key: %d frames reused", same)
	}
	if err := r2.CheckState(ctx, st4); err != nil {
		t.Fatal(err)
	}

	other := idle(`$h = Random.new(2).bytes(1 << 19).unpack1("H*"); x = 1`)
	fo := dataFrames(t, other)
	for i := range f1 {
		if len(fo[i]) != len(f1[i]) || bytes.Equal(fo[i], f1[i]) {
			continue
		}
		spliced := bytes.Replace(bytes.Clone(st1), f1[i], fo[i], 1)
		if err := r.CheckState(ctx, spliced); !errors.Is(err, ErrStateInvalid) {
			t.Fatalf("frame %d of another state spliced in: %v", i, err)
		}
		return
	}
	t.Fatal("no frame to splice")
}
