// The Runtime itself: views, closing, concurrency, logging of slow steps.

package glovebox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// A tool that ignores its context and returns right around the moment
// Eval gives up on the VM: the VM is either kept (and the result says ok)
// or freed (and the result says it was abandoned), never neither. A VM
// that is neither leaks its store and its scratch directory, which stays
// on the host after Close.
func TestAttackAbandonRace(t *testing.T) {
	tmp := t.TempDir()
	var ts glovebox.Toolset
	var n atomic.Int64
	must(t, ts.Func("slow", func() bool {
		// 130 to 170 ms, around Timeout + the 100 ms grace.
		time.Sleep(130*time.Millisecond + time.Duration(n.Add(1)%9)*5*time.Millisecond)
		return true
	}))
	r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, ScratchDir: tmp, Tools: &ts,
		Limits: glovebox.Limits{Timeout: 50 * time.Millisecond}})
	must(t, err)
	s, err := r.NewSession()
	must(t, err)
	statuses := map[glovebox.Status]int{}
	for range 20 {
		res, err := s.Eval(context.Background(), `slow; 1`)
		must(t, err)
		statuses[res.Status]++
		if (res.Status == glovebox.StatusOK) == res.SessionReset {
			t.Fatalf("status %s with SessionReset %v", res.Status, res.SessionReset)
		}
	}
	t.Logf("statuses %v", statuses)
	s.Close()
	r.Close()
	// An abandoned VM is freed when its tool returns, which may be after
	// Close: wait for that (a leaked VM never frees its directory).
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, _ := os.ReadDir(privateScratch(tmp))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scratch directories left after Close: VMs leaked", len(left))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Closing a session or its Runtime while an eval runs: the eval ends, the
// closes return, and later evals say ErrClosed.
func TestAttackCloseDuringEval(t *testing.T) {
	var ts glovebox.Toolset
	must(t, ts.Func("nap", func(ctx context.Context) bool { time.Sleep(300 * time.Millisecond); return true }))
	for _, withTools := range []bool{false, true} {
		cfg := glovebox.Config{PoolSize: -1}
		code := `t0 = Time.now; x = 0; x += 1 while Time.now - t0 < 0.5; x`
		if withTools {
			cfg.Tools = &ts
			code = `nap; nap; 1`
		}
		r := newRuntime(t, cfg)
		s, err := r.NewSession()
		must(t, err)
		sessionEval(t, s, `y = 1`)
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Eval(context.Background(), code)
				if err == nil && res.Status != glovebox.StatusOK {
					t.Errorf("status %s %v", res.Status, res.Error)
				}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		wg.Add(2)
		go func() { defer wg.Done(); s.Close() }()
		go func() { defer wg.Done(); r.Close() }()
		wg.Wait()
		if _, err := s.Eval(context.Background(), `1`); err == nil {
			t.Error("eval after close worked")
		}
	}
}

// TestNewLogsSlowStepsWithoutProgress: with Config.Progress nil, a slow
// first-run step (here the boot snapshot, in a cache that has the
// compiled module but no snapshot) is logged through Config.Logger at
// Info level as it starts and ends.
func TestNewLogsSlowStepsWithoutProgress(t *testing.T) {
	base, err := glovebox.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	images, _ := filepath.Glob(filepath.Join(base, "image", "*", "ruby+stdlib.wasm"))
	if os.Getenv("GLOVEBOX_IMAGE") != "" {
		images = []string{os.Getenv("GLOVEBOX_IMAGE")}
	}
	if len(images) != 1 {
		t.Skipf("no single cached image under %s (found %v)", base, images)
	}
	// A cache with everything but the snapshots: link (or copy) the
	// engine's files, leave out the snap-* directories.
	cache := t.TempDir()
	src := filepath.Join(base, "engine")
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(cache, "engine", rel)
		switch {
		case d.IsDir() && strings.HasPrefix(d.Name(), "snap-"):
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Name() == ".lock":
			return nil
		}
		if os.Link(p, dst) == nil {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r, err := glovebox.New(context.Background(), glovebox.Config{
		CacheDir: cache, ImagePath: images[0], PoolSize: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !strings.Contains(logs.String(), "level=INFO") || !strings.Contains(logs.String(), "snapshot") || !strings.Contains(logs.String(), "done") {
		t.Fatalf("the slow step was not logged:\n%s", logs.String())
	}
	if res := eval(t, r, "1 + 1"); res.Value != int64(2) && res.Value != 2 {
		t.Fatalf("value %#v", res.Value)
	}
}

// Many goroutines evaluating at once get correct, independent results.
func TestConcurrentEvals(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				want := int64(g*100 + i)
				res, err := rt.Eval(context.Background(), "$x = "+itoa(want)+"; sleep 0.001; $x")
				if err != nil || res.Status != glovebox.StatusOK || res.Value != want {
					errs <- itoa(want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("eval %s went wrong", e)
	}
}

// Closing a view (the README's `defer quick.Close()`) closes that view
// only: the Runtime it came from and its other views go on.
func TestClosingAViewLeavesTheRuntimeOpen(t *testing.T) {
	r := newRuntime(t, glovebox.Config{PoolSize: -1})
	quick, err := r.WithLimits(glovebox.Limits{Timeout: 5 * time.Second})
	must(t, err)
	other, err := r.WithLimits(glovebox.Limits{Stdout: 100})
	must(t, err)
	inner, err := quick.WithLimits(glovebox.Limits{Stderr: 100})
	must(t, err)
	wantStatus(t, eval(t, quick, `1`), glovebox.StatusOK)
	must(t, quick.Close())
	must(t, quick.Close()) // idempotent

	wantStatus(t, eval(t, r, `1 + 1`), glovebox.StatusOK)
	wantStatus(t, eval(t, other, `1 + 1`), glovebox.StatusOK)
	s, err := r.NewSession()
	must(t, err)
	defer s.Close()
	wantStatus(t, sessionEval(t, s, `1`), glovebox.StatusOK)

	if quick.Stats() != (glovebox.Stats{}) {
		t.Errorf("Stats of a closed view: %+v, want zero", quick.Stats())
	}
	// The closed view, and views derived from it, refuse.
	for name, v := range map[string]*glovebox.Runtime{"closed view": quick, "view of it": inner} {
		if _, err := v.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: Eval = %v, want ErrClosed", name, err)
		}
		if _, err := v.NewSession(); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: NewSession = %v, want ErrClosed", name, err)
		}
		if _, err := v.WithLimits(glovebox.Limits{}); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: WithLimits = %v, want ErrClosed", name, err)
		}
	}

	// Closing the Runtime closes its views.
	must(t, r.Close())
	if _, err := other.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrClosed) {
		t.Errorf("view of a closed Runtime: Eval = %v, want ErrClosed", err)
	}
}
