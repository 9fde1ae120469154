package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestAttackRewoundVMStillWatchedByItsLastEval: a tool-using eval's VM
// goroutine used to rewind the VM and hand it to the idle list before it
// reported to Eval. If Eval's deadline fired in that window (a busy
// machine deschedules the goroutine), Eval went on watching a VM that the
// next eval had already taken: seeing that eval inside a tool call, it
// gave up on it — marked the other eval's VM abandoned, returned the
// other eval's output as its own, and left the other eval waiting forever
// for a VM nobody would report. The hook holds the goroutine in that
// window while the next eval takes whatever VM is idle.
func TestAttackRewoundVMStillWatchedByItsLastEval(t *testing.T) {
	tools := []string{"probe"}
	release := make(chan struct{})
	var bInTool atomic.Bool
	call := func(ctx context.Context, c *Call) ([]byte, error) {
		if c.Args[0] == "B" {
			bInTool.Store(true)
			<-release
		}
		return Answer(nil, true, 8)
	}
	limA := testLimits
	limA.Timeout = 50 * time.Millisecond
	reqA := &Request{Code: `probe("A"); puts "A-OUT"; 1`, Limits: limA, Tools: tools, Call: call}
	reqB := &Request{Code: `puts "B-SECRET"; probe("B"); 2`, Limits: testLimits, Tools: tools, Call: call}

	type res struct {
		out *Outcome
		err error
	}
	bDone := make(chan res, 1)
	var hooked atomic.Bool
	start := time.Now()
	testHookSettled = func() {
		if !hooked.CompareAndSwap(false, true) {
			return
		}
		// A's VM has returned and settled. B starts now and takes an idle
		// VM with the same tools, if A's is idle already.
		go func() {
			out, err := testEngine.Eval(context.Background(), reqB)
			bDone <- res{out, err}
		}()
		for !bInTool.Load() && time.Since(start) < 5*time.Second {
			time.Sleep(time.Millisecond)
		}
		// Past A's deadline and grace, with B inside its tool call.
		time.Sleep(time.Until(start.Add(limA.Timeout + 3*abandonGrace)))
	}
	defer func() { testHookSettled = nil }()
	outA, err := testEngine.Eval(context.Background(), reqA)
	testHookSettled = nil
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	var b res
	select {
	case b = <-bDone:
	case <-time.After(20 * time.Second):
		t.Fatal("B never returned: the VM it ran in was given up by A's Eval, and nobody reports it")
	}
	if outA.Status != StatusOK || string(outA.Stdout) != "A-OUT\n" {
		t.Fatalf("A ended %s with stdout %q (%+v): it reported on a VM it no longer owned", outA.Status, outA.Stdout, outA.Error)
	}
	if b.err != nil || b.out.Status != StatusOK || string(b.out.Stdout) != "B-SECRET\n" {
		t.Fatalf("B: %v %+v", b.err, b.out)
	}
}
