package box_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
)

type fakeBox struct{ p box.Posture }

func (f fakeBox) Run(context.Context, box.Command) (*box.Result, error) { return nil, nil }
func (f fakeBox) Posture() box.Posture                                  { return f.p }

func TestRequireOffHost(t *testing.T) {
	for _, tc := range []struct {
		trust box.Trust
		ok    bool
	}{
		{box.TrustVendor, true}, {box.TrustRemote, true},
		{box.TrustVM, false}, {box.TrustHost, false}, {box.TrustNone, false},
	} {
		err := box.RequireOffHost(fakeBox{box.Posture{Backend: "x", Trust: tc.trust}})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, box.ErrNotOffHost)) {
			t.Errorf("trust %s: %v", tc.trust, err)
		}
	}
	if box.WasmPosture.OffHost() || box.WasmPosture.Isolation != box.IsolationWasm {
		t.Errorf("wasm posture %+v", box.WasmPosture)
	}
}

func TestNull(t *testing.T) {
	_, err := box.Null{}.Run(context.Background(), box.Command{Argv: []string{"true"}})
	if !errors.Is(err, box.ErrDisabled) {
		t.Errorf("Null.Run = %v", err)
	}
	if p := (box.Null{}).Posture(); p.Trust != box.TrustNone || p.Isolation != box.IsolationNone {
		t.Errorf("%+v", p)
	}
}

func TestValidate(t *testing.T) {
	bad := []box.Command{
		{},
		{Argv: []string{""}},
		{Argv: []string{"a\x00"}},
		{Shell: "x", Files: map[string][]byte{"../x": nil}},
		{Shell: "x", Files: map[string][]byte{"/etc/x": nil}},
		{Shell: "x", Files: map[string][]byte{"a/./b": nil}},
		{Shell: "x", Env: map[string]string{"A=B": "c"}},
		{Shell: "x", Limits: box.Limits{Memory: -1}},
		{Shell: "x", Network: box.Network{Allow: []string{"http://x"}}},
	}
	for i, c := range bad {
		if err := c.Validate(); !errors.Is(err, box.ErrInvalidCommand) {
			t.Errorf("%d: Validate = %v", i, err)
		}
	}
	ok := box.Command{Shell: "x", Files: map[string][]byte{"a/b.txt": nil}, Env: map[string]string{"A": "b"}}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}

func TestResultJSON(t *testing.T) {
	r := &box.Result{Stdout: "hi", ExitStatus: 124, TimedOut: true, Posture: box.Posture{Backend: "bwrap", Isolation: box.IsolationNamespaces, Trust: box.TrustHost},
		Outputs: map[string][]byte{"a.txt": []byte("x")}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for k, want := range map[string]any{"stdout": "hi", "exit_status": 124.0, "timed_out": true, "killed_for_memory": false,
		"backend": "bwrap", "isolation": "namespaces", "trust": "host", "off_host": false, "duration_ms": 0.0} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v (%s)", k, m[k], want, b)
		}
	}
	if !strings.Contains(string(b), `"outputs":{"a.txt":"x"}`) {
		t.Errorf("outputs: %s", b)
	}
}

func TestMountValidation(t *testing.T) {
	for _, m := range []box.Mount{
		{HostPath: "rel", GuestPath: "/data"},
		{HostPath: "/srv", GuestPath: "data"},
		{HostPath: "/srv", GuestPath: "/"},
		{HostPath: "/srv", GuestPath: "/data/../etc"},
		{HostPath: "/srv", GuestPath: "/etc"},
		{HostPath: "/srv", GuestPath: "/usr/local/x"},
		{HostPath: "/srv", GuestPath: "/work"},
		{HostPath: "/srv", GuestPath: "/run/glovebox"},
	} {
		c := box.Command{Argv: []string{"true"}, Mounts: []box.Mount{m}}
		if err := c.Validate(); !errors.Is(err, box.ErrInvalidCommand) {
			t.Errorf("%+v: %v", m, err)
		}
	}
	c := box.Command{Argv: []string{"true"}, Mounts: []box.Mount{{HostPath: "/srv", GuestPath: "/data"}, {HostPath: "/srv", GuestPath: "/mnt/in", Writable: true}}}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

// TestTypedNilTools: Validate turns Tools holding a nil
// *glovebox.ToolSession (what rt.ToolSession(0) returns on a Runtime
// without tools) into a nil Tools, and a nil *ToolSession answers as a
// session without tools. That every backend then runs without tools is
// the boxtest suite's TypedNilTools, which each backend's tests run.
func TestTypedNilTools(t *testing.T) {
	var none *glovebox.ToolSession // what rt.ToolSession(0) returns without tools
	c := box.Command{Argv: []string{"x"}, Tools: none}
	if err := c.Validate(); err != nil || c.Tools != nil {
		t.Fatalf("Validate: %v, Tools %#v; want no error and a nil Tools", err, c.Tools)
	}
	if none.Names() != nil || string(none.Transcript()) != "[]" || none.Calls() != nil ||
		!strings.HasPrefix(string(none.Call(context.Background(), "x", nil)), "err\nUnknownToolError\n") {
		t.Error("a nil *ToolSession does not answer as a session without tools")
	}
}

// TestNilCredential: a Credentials entry without a function is refused
// before the run (calling it panicked in every backend).
func TestNilCredential(t *testing.T) {
	c := box.Command{Argv: []string{"x"}, Credentials: map[string]func(context.Context) (string, error){"TOKEN": nil}}
	if err := c.Validate(); !errors.Is(err, box.ErrInvalidCommand) || !strings.Contains(err.Error(), "TOKEN") {
		t.Fatalf("Validate: %v", err)
	}
}
