package glovebox

import (
	"bytes"
	"errors"
	"testing"
)

// fuzzKeys seals the fuzz target's bodies.
var fuzzKeys, _ = NewKeyring(StateKey{ID: "fuzz", Secret: bytes.Repeat([]byte{7}, 32)})

// fuzzFlow is a Runtime with a labelled tool, to read a state's
// data-flow part with.
var fuzzFlow = func() *Runtime {
	var ts Toolset
	ts.Func("t", func() string { return "" })
	ts.Label("t", Label{Kind: KindEmail, Path: "."})
	return &Runtime{flow: ts.flow.clone()}
}()

// seedPaused is a paused eval's state body as sealPaused writes it.
func seedPaused() []byte {
	e := &benc{}
	manifest{image: "glovebox-abi-3/0123", tools: "1 tools", mounts: "[]", snapshot: "snap-0@1", limits: "{}"}.put(e)
	f := fuzzFlow.newFlow()
	f.record([]found{{KindEmail, "ann@example.com"}})
	putFlow(e, f)
	e.str("double(1)")
	e.bytes(nil)
	e.u64(1)
	e.str("arg")
	for _, x := range []uint64{1000, 2000, 3, 0, 10, 20} {
		e.u64(x)
	}
	e.bytes([]byte(`[{"n":"double","a":[1],"k":null,"r":2,"e":"","d":5,"x":false,"p":""}]`))
	e.str("double")
	e.bytes([]byte(`[[1],null]`))
	e.str("policy")
	e.u64(0)
	e.u64(0)
	e.u64(12345)
	e.u64(7)
	e.bytes([]byte("k\x05abcde"))
	e.bytes([]byte{1, 0})
	return e.b
}

// FuzzOpenState: no input makes opening a state, or decoding an
// authenticated body, panic or hang; damaged bytes are refused with the
// typed errors. Each input is tried as a sealed state and, sealed with
// the fuzz key, as a body of each kind.
func FuzzOpenState(f *testing.F) {
	f.Add([]byte("GBst\x02\x01\x04fuzz"))
	f.Add(seedPaused())
	sealed, _, _ := sealState(fuzzKeys, statePaused, seedPaused())
	f.Add(sealed)
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, _, err := openState(fuzzKeys, data); err != nil {
			var sm *StateMismatchError
			if !errors.Is(err, ErrStateInvalid) && !errors.Is(err, ErrStateKey) && !errors.As(err, &sm) {
				t.Fatalf("untyped refusal: %v", err)
			}
		}
		if _, err := StateID(data); err == nil && len(data) < 4+3+stateIDLen+nonceLen {
			t.Fatal("a truncated header gave an id")
		}
		st, _, err := sealState(fuzzKeys, statePaused, data)
		if err != nil {
			t.Fatal(err)
		}
		h, body, err := openState(fuzzKeys, st)
		if err != nil || h.kind != statePaused || !bytes.Equal(body, data) {
			t.Fatalf("round trip: %v", err)
		}
		d := &bdec{b: body}
		for range 5 {
			d.str()
		}
		if _, err := fuzzFlow.readFlow(d); err != nil {
			var sm *StateMismatchError
			if !errors.Is(err, ErrStateInvalid) && !errors.As(err, &sm) {
				t.Fatalf("untyped refusal: %v", err)
			}
		}
		if p, err := decodePaused(d); err == nil && p == nil {
			t.Fatal("nil without an error")
		} else if err != nil && !errors.Is(err, ErrStateInvalid) {
			t.Fatalf("untyped refusal: %v", err)
		}
	})
}
