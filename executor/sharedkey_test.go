package executor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// slowTools is a Runtime whose tool "slow" takes a while and counts its
// runs by argument: long enough for other clients to attach while a
// call is being answered.
func slowTools(t *testing.T, d time.Duration) (*gb.Runtime, func(id string) int64) {
	var mu sync.Mutex
	hits := map[string]int64{}
	var ts gb.Toolset
	ts.Add("slow", func(ctx context.Context, a gb.Args) (any, error) {
		id := fmt.Sprint(a.Positional...)
		mu.Lock()
		hits[id]++
		mu.Unlock()
		time.Sleep(d)
		return id, nil
	})
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, func(id string) int64 { mu.Lock(); defer mu.Unlock(); return hits[id] }
}

// TestEvalSharedKeyToolCallsOnce: clients of their own (each its own
// connection and Evaluator) racing one key attach to one eval; while the
// first holds the stream the others only watch, so each of its tool
// calls runs once on the clients' side, and all get the same result.
func TestEvalSharedKeyToolCallsOnce(t *testing.T) {
	p := startEvals(t)
	rt, hits := slowTools(t, 30*time.Millisecond)
	code := `[slow("k:1"), slow("k:2"), slow("k:3")]`
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 10 * time.Millisecond) // some attach mid-call
			ev := p.client(t, p.toks.a).Evaluator(rt)
			res, err := ev.EvalWith(context.Background(), code, client.EvalOptions{Key: "e-shared-tools"})
			if err != nil || fmt.Sprint(res.Value) != "[k:1 k:2 k:3]" {
				t.Errorf("client %d: %v %v", i, res, err)
				return
			}
			ok.Add(1)
		}()
	}
	wg.Wait()
	for _, id := range []string{"k:1", "k:2", "k:3"} {
		if n := hits(id); n != 1 {
			t.Errorf("the call slow(%q) ran %d times on the clients' side, want 1", id, n)
		}
	}
	if ok.Load() != 8 {
		t.Errorf("%d of 8 clients got the result", ok.Load())
	}
}

// TestEvalHolderGoneWatcherAnswers: when the client holding an eval's
// stream goes away with a call waiting, a client already watching it
// is handed the call and finishes the eval.
func TestEvalHolderGoneWatcherAnswers(t *testing.T) {
	p := startEvals(t)
	var ts gb.Toolset
	block := make(chan struct{})
	var first atomic.Bool
	ts.Add("ask", func(ctx context.Context, a gb.Args) (any, error) {
		if first.CompareAndSwap(false, true) {
			close(block)
			<-ctx.Done() // the holder never answers: its request is canceled
			return nil, ctx.Err()
		}
		return "answered", nil
	})
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	code := `ask("x")`
	ctx, cancel := context.WithCancel(context.Background())
	holderDone := make(chan error, 1)
	go func() {
		_, err := p.client(t, p.toks.a).Evaluator(rt).EvalWith(ctx, code, client.EvalOptions{Key: "e-holder-gone"})
		holderDone <- err
	}()
	<-block
	watcher := make(chan *gb.Result, 1)
	go func() {
		res, err := p.client(t, p.toks.a).Evaluator(rt).EvalWith(context.Background(), code, client.EvalOptions{Key: "e-holder-gone"})
		if err != nil {
			t.Error(err)
		}
		watcher <- res
	}()
	time.Sleep(200 * time.Millisecond) // the watcher is attached
	cancel()
	<-holderDone
	select {
	case res := <-watcher:
		if res == nil || res.Value != "answered" {
			t.Fatalf("the watcher's result: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call was not handed to the watcher")
	}
}

// TestEvalHolderGoneBetweenCalls: the holder goes away while no call
// waits; the eval's next call goes to the client still watching.
func TestEvalHolderGoneBetweenCalls(t *testing.T) {
	p := startEvals(t)
	rt, hits := slowTools(t, 0)
	code := `a = slow("g:1"); sleep 1; [a, slow("g:2")]`
	ctx, cancel := context.WithCancel(context.Background())
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		p.client(t, p.toks.a).Evaluator(rt).EvalWith(ctx, code, client.EvalOptions{Key: "e-holder-between"})
	}()
	for hits("g:1") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	watcher := make(chan *gb.Result, 1)
	go func() {
		res, err := p.client(t, p.toks.a).Evaluator(rt).EvalWith(context.Background(), code, client.EvalOptions{Key: "e-holder-between"})
		if err != nil {
			t.Error(err)
		}
		watcher <- res
	}()
	time.Sleep(200 * time.Millisecond) // the watcher is attached, the guest sleeps
	cancel()
	<-holderDone
	select {
	case res := <-watcher:
		if res == nil || fmt.Sprint(res.Value) != "[g:1 g:2]" {
			t.Fatalf("the watcher's result: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call after the holder left went to nobody")
	}
	if hits("g:1") != 1 || hits("g:2") != 1 {
		t.Errorf("calls ran %d and %d times, want once each", hits("g:1"), hits("g:2"))
	}
}
