package glovebox_test

import (
	"testing"
)

// deepStackCode exhausts the wasm stack (not Ruby's own stack check):
// Marshal.dump recurses in C once per level and reaches about 12,600 levels
// with the 6 MiB wasm stack.
const deepStackCode = `a = []; 20_000.times { a = [a] }; Marshal.dump(a)`

// An eval that ends in a wasm trap either unwound through Ruby (its
// rescue and ensure ran) or its VM is discarded and the result says so;
// a session never keeps a VM whose ensure clauses were skipped.
func TestSessionWasmTrapNeverKeepsDamagedVM(t *testing.T) {
	s := newSession(t, rt)
	sessionEval(t, s, `$m = Mutex.new; $ensured = 0; $depth = caller.size; nil`)
	for i := range 3 {
		res := sessionEval(t, s, `begin; $m.synchronize { `+deepStackCode+` }; ensure; $ensured += 1; end`)
		if res.SessionReset {
			if res := sessionEval(t, s, `defined?($m).inspect`); res.Value != "nil" || res.SessionReset {
				t.Fatalf("eval %d: reset reported but the state survived: %v", i, res.Value)
			}
			return
		}
		res = sessionEval(t, s, `[$m.locked?, $ensured, caller.size - $depth]`)
		if !equalValue(res.Value, []any{false, int64(i + 1), int64(0)}) {
			t.Fatalf("eval %d: the VM was kept after a trap skipped ensure: [locked?, ensured, extra frames] = %v", i, res.Value)
		}
	}
}

// The same holds for a plain begin/ensure and for a trap the guest tries
// to rescue.
func TestSessionWasmTrapEnsure(t *testing.T) {
	s := newSession(t, rt)
	sessionEval(t, s, `$log = []; nil`)
	res := sessionEval(t, s, `begin; `+deepStackCode+`; rescue SystemStackError; $log << :rescued; ensure; $log << :ensured; end; $log`)
	if res.SessionReset {
		return
	}
	if !equalValue(res.Value, []any{"rescued", "ensured"}) {
		t.Fatalf("kept without unwinding: status %s, value %v, error %+v", res.Status, res.Value, res.Error)
	}
}
