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
// made on demand (a miss), or took a memory the filler freed and reset.
func TestPooledVMsAreClean(t *testing.T) {
	p, err := testEngine.NewPool(context.Background(), 2, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before := testEngine.MemoryStats()
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
	if hits == 0 || misses == 0 || after.Reused == before.Reused {
		t.Fatalf("not every path was taken: %d hits, %d misses, %d memories reused", hits, misses, after.Reused-before.Reused)
	}
}

func replaceFD(code string, fd any) string { return fmt.Sprintf("FD = %v\n%s", fd, code) }
