package engine

import (
	"fmt"
	"testing"
	"time"
)

// Ruby boots with gcEnv: an eval that allocates 80,000 Floats (each a
// heap object on wasm32) runs no GC, where Ruby's default allowance
// (10,000 slots a heap) collects about 12 times; the environment that
// carried the setting is gone from the guest's ENV (TestGuestHomeAndUmask
// checks it is empty).
func TestBootGCAllowance(t *testing.T) {
	out := evalOut(t, `c = GC.count
		x = 0.5
		40_000.times { |i| x = i.to_f * x }
		[GC.count - c, ENV.key?("RUBY_GC_HEAP_0_INIT_SLOTS")]`, 30*time.Second)
	if out.Status != StatusOK {
		t.Fatalf("%s %+v", out.Status, out.Error)
	}
	if fmt.Sprint(out.Value) != "[0 false]" {
		t.Fatalf("GC runs and ENV: %v, want [0 false]", out.Value)
	}
}
