package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

func evalFuel(t *testing.T, code string, fuel uint64) *Outcome {
	t.Helper()
	l := testLimits
	l.Fuel = fuel
	out, err := testEngine.Eval(context.Background(), &Request{Code: code, Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The test engine meters with glovebox's rewrite, not wasmtime's fuel.
func TestMeteredEngineUsesTheRewrite(t *testing.T) {
	if !testEngine.meter {
		t.Fatal("the default metered engine does not use the fuel rewrite")
	}
	v, err := testEngine.prepared(testEngine.base, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	if _, err := v.store.Context().Fuel(); err == nil {
		t.Fatal("the metered engine's code also counts wasmtime fuel")
	}
	if !v.fuel.Valid() {
		t.Fatal("the VM has no fuel global")
	}
}

// Running out of fuel at a meter point stops the eval as fuel_exhausted
// (the host's out_of_fuel, not a trap the guest could cause another way),
// having used exactly its budget; the VM's output still arrives.
func TestMeterFuelExhausted(t *testing.T) {
	for _, code := range []string{
		"loop {}",
		"def f(n) = f(n + 1); f(0)", // recursion, no loop
		`puts "a"; s = +""; loop { s << "x"; s.clear }`,
		"[1, 2, 3].cycle { |x| x * 2 }", // a C-implemented loop calling a block
	} {
		out := evalFuel(t, code, 100_000_000)
		if out.Status != StatusFuelExhausted || out.Error == nil || out.Error.Class != "Glovebox::FuelExhausted" {
			t.Fatalf("%s: %s %+v", code, out.Status, out.Error)
		}
		if !strings.Contains(out.Error.Message, "100000000 units of fuel") || out.FuelUsed != 100_000_000 {
			t.Fatalf("%s: used %d, message %q", code, out.FuelUsed, out.Error.Message)
		}
	}
}

// The same program uses the same fuel every run, in fresh VMs; twice the
// work uses about twice the fuel; and a guest cannot change its fuel by
// assigning globals it can name or by calling the host.
func TestMeterFuelIsDeterministic(t *testing.T) {
	progs := []string{
		"i = 0; while i < 20_000; i += 1; end; i",
		"(1..2000).map { |x| x.to_s * 3 }.join.size",
		"def f(n) = n < 2 ? n : f(n - 1) + f(n - 2); f(18)",
		`{"a" => 1, "b" => 2}.map { |k, v| k * v }.join`,
	}
	for _, code := range progs {
		first := evalFuel(t, code, 1<<40)
		if first.Status != StatusOK || first.FuelUsed == 0 {
			t.Fatalf("%s: %s, fuel %d", code, first.Status, first.FuelUsed)
		}
		for range 2 {
			if again := evalFuel(t, code, 1<<40); again.FuelUsed != first.FuelUsed {
				t.Fatalf("%s: fuel %d then %d", code, first.FuelUsed, again.FuelUsed)
			}
		}
	}
	one := evalFuel(t, "i = 0; while i < 100_000; i += 1; end", 1<<40).FuelUsed
	two := evalFuel(t, "i = 0; while i < 200_000; i += 1; end", 1<<40).FuelUsed
	if r := float64(two) / float64(one); r < 1.8 || r > 2.2 {
		t.Fatalf("100k iterations %d fuel, 200k %d (ratio %.2f)", one, two, r)
	}
	// The only ways a Ruby program reaches the host are the image's
	// imports; none of them touches the fuel global.
	for _, code := range []string{
		`$glovebox_fuel = 1 << 60; loop {}`,
		`Glovebox.send(:__send, "x", "") rescue nil; loop {}`,
	} {
		if out := evalFuel(t, code, 20_000_000); out.Status != StatusFuelExhausted && out.Status != StatusSandboxError {
			t.Fatalf("%s: %s", code, out.Status)
		}
	}
}

// A trap is fuel_exhausted only when the fuel global is below zero: the
// guest's own unreachable (an abort in C) stays a crash.
func TestMeterTrapIsToldFromGuestUnreachable(t *testing.T) {
	v, err := testEngine.prepared(testEngine.base, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	v.limits = testLimits
	c := v.store.Context()
	for _, tc := range []struct {
		fuel int64
		want Status
	}{{1000, StatusSandboxError}, {0, StatusSandboxError}, {-3, StatusFuelExhausted}} {
		if err := v.fuel.Set(c, tc.fuel); err != nil {
			t.Fatal(err)
		}
		out := &Outcome{}
		v.classify(&wt.Error{Code: wt.TrapUnreachable, Message: "wasm trap: wasm `unreachable` instruction executed"}, out)
		if out.Status != tc.want {
			t.Fatalf("unreachable with fuel %d: %s, want %s", tc.fuel, out.Status, tc.want)
		}
	}
}
