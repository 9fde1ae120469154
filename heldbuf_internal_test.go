package glovebox

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

// poisoned makes every buffer a last holder gives back read as 0xA5 until
// the test ends, so that a state read from a buffer after its release is
// garbage (and fails to restore) instead of passing by luck.
func poisoned(t *testing.T) {
	prev := poisonBuf
	poisonBuf = func(b []byte) {
		b = b[:cap(b)]
		for i := range b {
			b[i] = 0xA5
		}
	}
	t.Cleanup(func() { poisonBuf = prev })
}

// TestHeldBaseOutlivesClose: a resumed session's history keeps its
// opened body in a pooled buffer. An eval running on it holds the buffer
// until the eval has ended, so a paused state it seals after Close has
// run (Close waits only for the VM, not for the sealing) still holds the
// session's base, even when other sessions take and fill the pooled
// buffers meanwhile; and the buffer goes back once nothing holds it.
func TestHeldBaseOutlivesClose(t *testing.T) {
	poisoned(t)
	ctx := context.Background()
	scratch, err := os.MkdirTemp("/dev/shm", "glovebox-heldbuf-test-")
	if err != nil {
		scratch = t.TempDir()
	}
	defer os.RemoveAll(scratch)
	keys, err := NewKeyring(StateKey{ID: "k", Secret: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	inTool, release := make(chan *Session, 1), make(chan struct{})
	var ts Toolset
	var s *Session
	err = ts.Add("wait", func(context.Context, Args) (any, error) {
		inTool <- s
		<-release
		return nil, SuspendCall("later")
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(ctx, Config{StateKeys: keys, Tools: &ts, PoolSize: 1, ScratchDir: scratch})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	idle := func(code string) []byte {
		s, err := r.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.Eval(ctx, code); err != nil || res.Status != StatusOK {
			t.Fatal(code, err, res)
		}
		st, err := s.Suspend(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	mine := idle(`$big = "m" * 300_000; x = 41`)
	other := idle(`$big = "o" * 900_000; x = 0`)

	if s, err = r.ResumeSession(ctx, mine); err != nil {
		t.Fatal(err)
	}
	held := s.hist.held
	if held == nil || held.refs.Load() != 2 || s.seals.body != held {
		t.Fatalf("a resumed session's history (held by it and the frames its next checkpoint reuses): %d holders", held.refs.Load())
	}
	type result struct {
		res *Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Eval(ctx, `y = wait; x + 1 + $big.size`)
		done <- result{res, err}
	}()
	<-inTool
	if n := held.refs.Load(); n != 3 {
		t.Fatalf("while an eval runs, %d holders (want the session, its frames and the eval)", n)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	close(release)
	<-closed
	// Close has returned: other sessions now take and fill buffers; the
	// eval may still be sealing its state.
	for range 3 {
		o, err := r.ResumeSession(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if other, err = o.Suspend(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := <-done
	if got.err != nil || got.res.Status != StatusSuspended {
		t.Fatalf("%v %+v", got.err, got.res)
	}
	if n := held.refs.Load(); n != 0 || held.b != nil {
		t.Fatalf("after Close and the eval, %d holders", n)
	}
	// Continue the paused eval: its base must be the session's.
	p, err := r.ResumeSession(ctx, got.res.State)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Continue(ctx, Answer{Value: 1})
	if err != nil || res.Status != StatusOK || res.Value != int64(42+300_000) {
		t.Fatalf("continued: %v %+v", err, res)
	}
}

// TestHeldBaseAcrossEvals: an eval that ends without pausing hands the
// session's hold on to its new history; Suspend gives the buffer back.
func TestHeldBaseAcrossEvals(t *testing.T) {
	poisoned(t)
	ctx := context.Background()
	keys, err := NewKeyring(StateKey{ID: "k", Secret: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(ctx, Config{StateKeys: keys, PoolSize: 1, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, `$big = "m" * 300_000; x = 1`); err != nil {
		t.Fatal(err)
	}
	state, err := s.Suspend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s, err := r.ResumeSession(ctx, state)
		if err != nil {
			t.Fatal(err)
		}
		held := s.hist.held
		res, err := s.Eval(ctx, `x += 1`)
		if err != nil || res.Status != StatusOK || res.Value != int64(i+2) {
			t.Fatalf("eval %d: %v %+v", i, err, res)
		}
		if s.hist.held != held || held.refs.Load() != 2 { // the history and the frames
			t.Fatalf("after an eval: the history holds %p (was %p), %d holders", s.hist.held, held, held.refs.Load())
		}
		if state, err = s.Suspend(ctx); err != nil {
			t.Fatal(err)
		}
		if held.refs.Load() != 0 || s.hist != nil {
			t.Fatalf("after Suspend: %d holders", held.refs.Load())
		}
	}
}

// TestStateBufReserve: a sealed state's buffer from the reserve is its
// own (never the same memory as another's, even once the other was
// written), of the length asked, with at most an eighth more capacity.
func TestStateBufReserve(t *testing.T) {
	const n = 1 << 20
	var got [][]byte
	for range 20 {
		b := newStateBuf(n)
		if len(b) != n || cap(b) > n+n/8 {
			t.Fatalf("len %d cap %d", len(b), cap(b))
		}
		for _, o := range got {
			if &o[0] == &b[0] {
				t.Fatal("the reserve handed out one buffer twice")
			}
		}
		got = append(got, b)
		for i := range b {
			b[i] = 0xA5
		}
		time.Sleep(5 * time.Millisecond) // let the reserve refill
	}
	if b := newStateBuf(minReserve - 1); len(b) != minReserve-1 {
		t.Fatal(len(b))
	}
}
