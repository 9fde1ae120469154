package glovebox

import (
	"encoding/json"
	"testing"
)

// A session's labels and tokens survive being saved and restored (what a
// suspended session needs): the same value keeps its token, a new value
// gets the token the original state would have given it, and Reveal and
// the sink checks work on the restored state.
func TestFlowSaveRestore(t *testing.T) {
	var ts Toolset
	ts.Func("t", func() string { return "" })
	ts.Func("sink", func(s string) string { return s })
	if err := ts.Label("t", Label{Kind: KindEmail, Path: "."}); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{flow: ts.flow.clone()}
	f := r.newFlow()
	f.record([]found{{KindEmail, "ann@example.com"}, {KindPhone, "+1 555 010 9999"}})
	b, err := json.Marshal(f.save())
	if err != nil {
		t.Fatal(err)
	}
	var s flowSaved
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	g, err := r.restoreFlow(&s)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := f.redactString("to ann@example.com"), g.redactString("to ANN@example.com"); a != b || a == "to ann@example.com" {
		t.Errorf("before %q, after %q: want one token", a, b)
	}
	f.record([]found{{KindEmail, "bob@example.com"}})
	g.record([]found{{KindEmail, "bob@example.com"}})
	if a, b := f.redactString("bob@example.com"), g.redactString("bob@example.com"); a != b {
		t.Errorf("a new value got %q before and %q after", a, b)
	}
	if _, d := g.checkArgs("sink", Args{Positional: []any{"call 5550109999"}}); d == nil || d.kind != KindPhone {
		t.Errorf("the restored state let a phone number through: %+v", d)
	}
	if _, err := (&Runtime{}).restoreFlow(&s); err == nil {
		t.Error("a Runtime without labels restored labelled values")
	}
	s.Values[0].Token = "not a token"
	if _, err := r.restoreFlow(&s); err == nil {
		t.Error("a malformed token was restored")
	}
}
