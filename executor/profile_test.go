package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// startProfiles is an in-process executor with two eval profiles:
// "analytics" for tenant a (a read-only directory at /data, a tool run
// here, a 2 s timeout cap) and "billing" for tenant b only.
func startProfiles(t *testing.T) (*inproc, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sales.csv"), []byte("month,total\njan,10\nfeb,32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ts gb.Toolset
	if err := ts.Func("rates", func() map[string]any { return map[string]any{"usd": 1, "eur": 0.9} }); err != nil {
		t.Fatal(err)
	}
	p := startInproc(t, 1, nil)
	err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, Profiles: map[string]executor.EvalProfile{
		"analytics": {Tenants: []string{"a"}, Mounts: []gb.Mount{{HostPath: dir, GuestPath: "/data", Description: "sales CSVs"}},
			Tools: &ts, Servers: []codemode.Server{{Name: "fx", Tools: []string{"rates"}, Instructions: "Rates are daily."}},
			Limits: gb.Limits{Timeout: 2 * time.Second}},
		"billing": {Tenants: []string{"b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p, dir
}

// TestEvalProfile: an eval naming a profile gets the operator's mounts
// (read-only) and tools run on the executor beside the client's own,
// under the profile's limits; a session too; another tenant's profile,
// or none, is unknown_profile; a client tool named like the profile's
// is refused.
func TestEvalProfile(t *testing.T) {
	p, dir := startProfiles(t)
	a := newApp(t, gb.Limits{})
	ev := p.client(t, p.toks.a).Evaluator(a.rt).WithProfile("analytics")
	res, err := ev.Eval(context.Background(), `
		rows = File.readlines("/data/sales.csv").drop(1).sum { _1.split(",")[1].to_i }
		denied = begin; File.write("/data/x", "no"); "written"; rescue SystemCallError => e; e.class.name; end
		[rows, rates["eur"], add(1, 2), denied]`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusOK)
	v := res.Value.([]any)
	if v[0] != int64(42) || v[1] != 0.9 || v[2] != int64(3) || !strings.HasPrefix(v[3].(string), "Errno::E") {
		t.Fatalf("value %v", v)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Fatal("the guest wrote to a read-only mount")
	}
	// The client's tools came back here; the profile's ran on the executor.
	if a.hits.Load() != 1 {
		t.Fatalf("%d client tool runs, want 1 (add)", a.hits.Load())
	}
	res, err = ev.Eval(context.Background(), `sleep 5; 1`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusTimeout) // the profile's 2 s, not the client's 10 s
	s, err := ev.NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Eval(context.Background(), `@n = File.read("/data/sales.csv").lines.size`); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(context.Background(), `[@n, rates["usd"]]`); err != nil || res.Status != gb.StatusOK || res.Value.([]any)[0] != int64(3) {
		t.Fatalf("session: %+v %v", res, err)
	}
	for _, name := range []string{"billing", "nope"} {
		_, err := p.client(t, p.toks.a).Evaluator(a.rt).WithProfile(name).Eval(context.Background(), `1`)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != "unknown_profile" || !strings.Contains(ce.Message, name) {
			t.Fatalf("profile %s for tenant a: %v", name, err)
		}
		if _, err := p.client(t, p.toks.a).Evaluator(a.rt).WithProfile(name).NewSession(context.Background()); !errors.As(err, &ce) || ce.Code != "unknown_profile" {
			t.Fatalf("a session of profile %s: %v", name, err)
		}
	}
	var clash gb.Toolset
	clash.Func("rates", func() int { return 1 })
	crt, err := gb.New(context.Background(), gb.Config{Tools: &clash, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer crt.Close()
	_, err = p.client(t, p.toks.a).Evaluator(crt).WithProfile("analytics").Eval(context.Background(), `rates`)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "bad_request" || !strings.Contains(ce.Message, "rates") {
		t.Fatalf("a client tool named like the profile's: %v", err)
	}
	code, body := rawDo(t, p, p.toks.a, "POST", "/v1/evals", `{"code":"1","limits":{},"profile":"Bad Name"}`)
	if code != 400 || !strings.Contains(body, "bad_request") {
		t.Fatalf("a malformed profile name: %d %s", code, body)
	}
	code, body = rawDo(t, p, p.toks.a, "POST", "/v1/evals", `{"code":"1","limits":{},"profile":"nope"}`)
	if code != 400 || !strings.Contains(body, "unknown_profile") {
		t.Fatalf("an unknown profile over the wire: %d %s", code, body)
	}
}

// TestEvalProfileCodeMode: code mode's description of a profile lists
// its tools, server notes and mounts beside the client's tools, with its
// limits.
func TestEvalProfileCodeMode(t *testing.T) {
	p, _ := startProfiles(t)
	code, body := rawDo(t, p, p.toks.a, "POST", "/v1/codemode",
		`{"tools":[{"name":"orders","description":"The orders."}],"limits":{},"profile":"analytics"}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	for _, want := range []string{`### orders`, `### rates`, `/data (read-only): sales CSVs`, `### Server fx`, `Rates are daily.`, `2 s of wall-clock time`} {
		if !strings.Contains(body, want) {
			t.Errorf("the description lacks %q:\n%s", want, body)
		}
	}
	code, body = rawDo(t, p, p.toks.b, "POST", "/v1/codemode", `{"limits":{},"profile":"analytics"}`)
	if code != 400 || !strings.Contains(body, "unknown_profile") {
		t.Fatalf("another tenant's profile: %d %s", code, body)
	}
}

// TestEvalProfileConfigChecked: a profile that cannot serve is refused
// when evals are enabled, naming it.
func TestEvalProfileConfigChecked(t *testing.T) {
	for name, prof := range map[string]executor.EvalProfile{
		"no-tenants": {},
		"Bad Name":   {Tenants: []string{"a"}},
		"gone-dir":   {Tenants: []string{"a"}, Mounts: []gb.Mount{{HostPath: "/nonexistent/dir", GuestPath: "/data"}}},
		"bad-guest":  {Tenants: []string{"a"}, Mounts: []gb.Mount{{HostPath: t.TempDir(), GuestPath: "relative"}}},
	} {
		p := startInproc(t, 1, nil)
		err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, Profiles: map[string]executor.EvalProfile{name: prof}})
		if err == nil || !strings.Contains(err.Error(), "eval profile "+name) && !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("profile %s: %v", name, err)
		}
	}
}

// TestEvalProfileAcrossFleet: a profile travels with what the store
// keeps: a session made through one executor of a fleet goes on through
// the other with the profile's mount and tool, and a paused eval of a
// profile continues through the other with them.
func TestEvalProfileAcrossFleet(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "n.txt"), []byte("7"), 0o644)
	var ts gb.Toolset
	ts.Func("rates", func() int { return 3 })
	cfg := executor.EvalConfig{PoolSize: -1, StateKeys: fleetKeys(t), Profiles: map[string]executor.EvalProfile{
		"analytics": {Tenants: []string{"a"}, Mounts: []gb.Mount{{HostPath: dir, GuestPath: "/data"}}, Tools: &ts}}}
	p1, p2 := startPgPairWith(t, cfg)
	a := newApp(t, gb.Limits{})
	ctx := context.Background()
	e1 := p1.client(t, p1.toks.a).Evaluator(a.rt).WithProfile("analytics")
	e2 := p2.client(t, p2.toks.a).Evaluator(a.rt).WithProfile("analytics")
	s, err := e1.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, `@x = File.read("/data/n.txt").to_i`); err != nil {
		t.Fatal(err)
	}
	s2 := e2.Attach(s.ID())
	res, err := s2.Eval(ctx, `@x * rates`)
	if err != nil || res.Status != gb.StatusOK || res.Value != int64(21) {
		t.Fatalf("the session through the other executor: %+v %v", res, err)
	}
	res, err = e1.EvalWith(ctx, `n = File.read("/data/n.txt").to_i; add(n, rates)`, client.EvalOptions{Key: "e-prof-1", Suspend: []string{"add"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("the pause: %+v %v", res, err)
	}
	res, err = e2.Continue(ctx, "e-prof-1", client.Answer{Approve: true}, client.EvalOptions{Key: "e-prof-2"})
	if err != nil || res.Status != gb.StatusOK || res.Value != int64(10) {
		t.Fatalf("continued through the other executor: %+v %v", res, err)
	}
}
