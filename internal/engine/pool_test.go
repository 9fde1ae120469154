package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPooledVMsAreClean: what one pooled eval leaves behind — a global,
// a constant, a monkey-patch, an open file descriptor, a file in scratch,
// a changed random seed — is invisible to every later eval from the same
// pool, whether its VM was prepared while the pool was idle (a hit),
// made on demand (a miss), rewound after an earlier eval (rewind.go), or,
// with reuse off, made over a memory an earlier VM freed and reset.
func TestPooledVMsAreClean(t *testing.T) {
	for _, reuse := range []bool{true, false} {
		t.Run(map[bool]string{true: "rewound", false: "made"}[reuse], func(t *testing.T) { testPooledVMsAreClean(t, reuse) })
	}
}

func testPooledVMsAreClean(t *testing.T, reuse bool) {
	p, err := testEngine.NewPool(context.Background(), 2, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !reuse {
		p.DisableReuse()
	}
	before := testEngine.MemoryStats()
	rw0, _ := testEngine.ReuseStats()
	lim := testLimits
	lim.FS = FSLimits{Write: 1 << 20, Creates: 10}
	eval := func(code string) any {
		t.Helper()
		out, err := p.Eval(context.Background(), &Request{Code: code, Limits: lim})
		if err != nil || out.Status != StatusOK {
			t.Fatalf("%s: %v %+v %+v", code, err, out, out.Error)
		}
		return out.Value
	}
	const dirty = `$leak = "SECRET"; LEAK = 1; class Integer; def to_s(*) = "patched"; end; class String; def leak? = true; end
f = File.open("/tmp/leak.txt", "w"); f.write("SECRET"); f.flush
srand(1); [f.fileno, rand(1 << 30)]`
	const probe = `[defined?($leak), defined?(LEAK), 1.to_s + "".respond_to?(:leak?).to_s, File.exist?("/tmp/leak.txt"), (IO.for_fd(FD, autoclose: false).read rescue "closed"), rand(1 << 30)]`
	var fd, seeded any
	for round := range 12 {
		v := eval(dirty).([]any)
		fd, seeded = v[0], v[1]
		if round%2 == 0 {
			time.Sleep(20 * time.Millisecond) // let the filler free the VM and refill
		}
		got := eval(replaceFD(probe, fd)).([]any)
		if got[0] != nil || got[1] != nil || got[2] != "1false" || got[3] != false || got[4] != "closed" {
			t.Fatalf("round %d: the next pooled eval saw the last one's state: %v", round, got)
		}
		if got[5] == seeded {
			t.Fatalf("round %d: the next pooled eval has the last one's random seed", round)
		}
	}
	hits, misses := p.Stats()
	after := testEngine.MemoryStats()
	rw1, _ := testEngine.ReuseStats()
	if hits == 0 || misses == 0 || (reuse && rw1 == rw0) || (!reuse && (after.Reused == before.Reused || rw1 != rw0)) {
		t.Fatalf("not every path was taken: %d hits, %d misses, %d memories reused, %d VMs rewound", hits, misses, after.Reused-before.Reused, rw1-rw0)
	}
}

func replaceFD(code string, fd any) string { return fmt.Sprintf("FD = %v\n%s", fd, code) }

// TestPoolFillerSleepsWhileBusy: while an eval of the pool runs, its
// filler neither prepares a VM nor wakes up to look (it used to wake
// every quietAfter, 1,000 times a second, on the cores the evals use);
// once the pool has been quiet for quietAfter it fills again.
func TestPoolFillerSleepsWhileBusy(t *testing.T) {
	p, err := testEngine.NewPool(context.Background(), 1, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !p.ready.full(); {
			if time.Now().After(deadline) {
				t.Fatal("the pool did not fill within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitReady()
	// An eval is running (the one get serves), with the pool empty.
	p.begin()
	v, err := p.get()
	if err != nil {
		p.end()
		t.Fatal(err)
	}
	w0 := p.wakes.Load()
	time.Sleep(50 * time.Millisecond)
	woke, filled := p.wakes.Load()-w0, p.ready.len()
	p.e.recycle(v)
	p.end()
	// One wake-up may be a timer set before the eval began.
	if woke > 1 || filled != 0 {
		t.Errorf("during 50 ms of a running eval the filler woke %d times and filled %d VMs, want at most 1 and 0", woke, filled)
	}
	waitReady()
}

// TestEvalWaitsForTheFillersVM: an eval that finds the pool empty while
// the filler holds one of its VMs (rewinding or renewing it) takes that
// VM once it is given back instead of making one; with none held, it
// makes one at once. Making one used to be the rule, and the VM given
// back then found the idle list full and was freed: a VM made and freed
// every 40 evals through the executor.
func TestEvalWaitsForTheFillersVM(t *testing.T) {
	p, err := testEngine.NewPool(context.Background(), 1, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Stop the filler: it must not touch the pool's VMs below.
	p.begin()
	defer p.end()
	v, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	out := v.run(context.Background(), &Request{Code: "1+1", Limits: testLimits})
	if out.Status != StatusOK {
		t.Fatalf("%+v", out)
	}
	p.e.recycle(v) // into the idle list, dirty
	for v := p.ready.pop(); v != nil; v = p.ready.pop() {
		v.close()
	}
	// Play the filler: take the VM out, then give it back later.
	held := p.idle.take(v.toolsKey, true)
	if held != v {
		t.Fatalf("the idle list did not hold the VM just recycled")
	}
	got := make(chan *VM, 1)
	go func() {
		w, err := p.get()
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	select {
	case w := <-got:
		t.Fatalf("get returned %p while the filler held the pool's only VM, without waiting for it", w)
	case <-time.After(50 * time.Millisecond):
	}
	p.idle.gave(held)
	w := <-got
	if w != held {
		t.Fatalf("get returned another VM (%p) than the one given back (%p)", w, held)
	}
	p.e.recycle(w)
	// Nothing held and nothing idle: get makes a VM without waiting.
	if w := p.idle.take(w.toolsKey, false); w != nil {
		w.close()
	}
	w, err = p.get()
	if err != nil || w == nil || w == held {
		t.Fatalf("get with nothing held: %p, %v", w, err)
	}
	w.close()
}
