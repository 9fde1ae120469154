package glovebox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// claimRuntime is a Runtime whose tool "add" counts its runs, whose calls
// all suspend (a host-wide policy), with a read-only mount at /data and
// a StateStore in dir.
func claimRuntime(t *testing.T, data, dir string, runs *atomic.Int64) *glovebox.Runtime {
	t.Helper()
	store, err := glovebox.NewDirStateStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ts glovebox.Toolset
	ts.Add("add", func(_ context.Context, args glovebox.Args) (any, error) {
		runs.Add(1)
		return toInt(args.Positional[0]) + 1, nil
	})
	r, err := glovebox.New(context.Background(), glovebox.Config{
		Tools: &ts, PoolSize: -1, ScratchDir: ownScratch(t), StateKeys: testKeyring(t), StateStore: store,
		Mounts: []glovebox.Mount{{HostPath: data, GuestPath: "/data"}},
		Hooks:  glovebox.Hooks{BeforeCall: func(context.Context, string, glovebox.Args) error { return glovebox.SuspendCall("policy") }},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestContinueClaimsAtTheCall: the StateStore's record is taken when the
// replay reaches the paused call. A continuation that diverged (a mounted
// file read before the pause changed) or was canceled before it got
// there leaves the state continuable; once the file is back it continues,
// and a second continuation after that is refused, the tool having run
// once.
func TestContinueClaimsAtTheCall(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	file := filepath.Join(data, "n.txt")
	if err := os.WriteFile(file, []byte("41"), 0o644); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	r := claimRuntime(t, data, t.TempDir(), &runs)
	paused := pausedState(t, r, `add(File.read("/data/n.txt").to_i)`)
	approve := glovebox.Answer{Approved: true}

	os.WriteFile(file, []byte("7"), 0o644)
	if _, err := r.Continue(ctx, paused, approve); !errors.Is(err, glovebox.ErrStateDiverged) {
		t.Fatalf("continued with the file changed: %v", err)
	}
	if _, err := r.Continue(ctx, paused, approve); !errors.Is(err, glovebox.ErrStateDiverged) {
		t.Fatalf("again (a retry is not refused as used): %v", err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if res, err := r.Continue(gone, paused, approve); err == nil && res.Status != glovebox.StatusCanceled {
		t.Fatalf("a canceled continuation: %+v", res)
	}
	if runs.Load() != 0 {
		t.Fatalf("the tool ran %d times before any continuation reached the call", runs.Load())
	}

	os.WriteFile(file, []byte("41"), 0o644)
	res, err := r.Continue(ctx, paused, approve)
	if err != nil || res.Status != glovebox.StatusOK || res.Value != int64(42) {
		t.Fatalf("continued with the file back: %v %+v", err, res)
	}
	if _, err := r.Continue(ctx, paused, approve); !errors.Is(err, glovebox.ErrStateUsed) {
		t.Fatalf("a second continuation: %v", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("the tool ran %d times, want 1", runs.Load())
	}
}

// TestContinueConcurrentOnce: continuations of one state started at the
// same time (in two Runtimes sharing a store) all replay, and exactly one
// answers the call: the others get ErrStateUsed, the tool runs once.
func TestContinueConcurrentOnce(t *testing.T) {
	ctx := context.Background()
	data, dir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(data, "n.txt"), []byte("1"), 0o644)
	var runs atomic.Int64
	r1 := claimRuntime(t, data, dir, &runs)
	r2 := claimRuntime(t, data, dir, &runs)
	paused := pausedState(t, r1, `s = 0; 2000.times { |i| s += i }; add(File.read("/data/n.txt").to_i + s)`)
	var wg sync.WaitGroup
	var ok, used atomic.Int64
	for i := range 4 {
		r := []*glovebox.Runtime{r1, r2}[i%2]
		wg.Go(func() {
			res, err := r.Continue(ctx, paused, glovebox.Answer{Approved: true})
			switch {
			case errors.Is(err, glovebox.ErrStateUsed):
				used.Add(1)
			case err == nil && res.Status == glovebox.StatusOK:
				ok.Add(1)
			default:
				t.Errorf("%v %+v", err, res)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || used.Load() != 3 || runs.Load() != 1 {
		t.Fatalf("%d answered, %d refused, the tool ran %d times; want 1, 3, 1", ok.Load(), used.Load(), runs.Load())
	}
}

// TestSessionContinueDivergedStaysPaused: a session's continuation that
// cannot replay leaves the session paused in the same call; once the
// cause is undone it continues.
func TestSessionContinueDivergedStaysPaused(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	file := filepath.Join(data, "n.txt")
	os.WriteFile(file, []byte("41"), 0o644)
	var runs atomic.Int64
	r := claimRuntime(t, data, t.TempDir(), &runs)
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Eval(ctx, `base = 100`); err != nil {
		t.Fatal(err)
	}
	res, err := s.Eval(ctx, `base + add(File.read("/data/n.txt").to_i)`)
	if err != nil || res.Status != glovebox.StatusSuspended {
		t.Fatalf("%v %+v", err, res)
	}
	os.WriteFile(file, []byte("7"), 0o644)
	if _, err := s.Continue(ctx, glovebox.Answer{Approved: true}); !errors.Is(err, glovebox.ErrStateDiverged) {
		t.Fatalf("continued with the file changed: %v", err)
	}
	if pc := s.Pending(); pc == nil || pc.ID != res.Pending.ID {
		t.Fatalf("no longer paused in its call: %+v", pc)
	}
	if _, err := s.Eval(ctx, `1`); !errors.Is(err, glovebox.ErrSessionPaused) {
		t.Fatalf("an eval on the paused session: %v", err)
	}
	os.WriteFile(file, []byte("41"), 0o644)
	res, err = s.Continue(ctx, glovebox.Answer{Approved: true})
	if err != nil || res.Value != int64(142) || s.Pending() != nil {
		t.Fatalf("%v %+v", err, res)
	}
	if res, err := s.Eval(ctx, `base`); err != nil || res.Value != int64(100) {
		t.Fatalf("%v %+v", err, res)
	}
}
