package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/remote"
)

type fakeExec struct{ got remote.Request }

func (f *fakeExec) Isolation() box.Isolation { return box.IsolationGVisor }
func (f *fakeExec) Run(ctx context.Context, r remote.Request) (*box.Result, error) {
	f.got = r
	return &box.Result{Stdout: "ok"}, nil
}

func TestRemoteIsOffHost(t *testing.T) {
	x := &fakeExec{}
	b := remote.New(x, func(c *box.Command) string { return "k-" + strings.Join(c.Argv, "_") })
	if err := box.RequireOffHost(b); err != nil {
		t.Fatal(err)
	}
	var streamed string
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"a"}, Stream: func(_ int, p []byte) { streamed += string(p) },
		Credentials: map[string]func(context.Context) (string, error){"T": func(context.Context) (string, error) { return "sec-77", nil }}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Trust != box.TrustRemote || res.Isolation != box.IsolationGVisor || !res.OffHost() {
		t.Errorf("%+v", res.Posture)
	}
	if x.got.Stream == nil || x.got.Command.Stream != nil {
		t.Error("the local Stream should travel in the Request, not the Command")
	} else if x.got.Stream(1, []byte("out")); streamed != "out" {
		t.Errorf("streamed %q", streamed)
	}
	if x.got.Credentials["T"] != "sec-77" || x.got.Command.Credentials != nil || strings.Contains(x.got.IdempotencyKey, "sec-77") {
		t.Errorf("request %+v", x.got)
	}
}

// TestConformance runs the box contract against the remote box over a
// fake executor (the executor's own tests run the real one).
func TestConformance(t *testing.T) {
	boxtest.Run(t, boxtest.Backend{
		Name:    "remote",
		New:     func(t *testing.T) box.Box { return remote.New(&fakeExec{}, nil) },
		Posture: box.Posture{Backend: "remote", Isolation: box.IsolationGVisor, Trust: box.TrustRemote},
		Cannot:  boxtest.Fake("a fake executor answers every run with the same Result"),
	})
}

// A Command with Network.Inspect is refused: the executor's proxy runs in
// another process and could not ask it, so the requests would leave
// uninspected.
func TestRemoteRefusesInspect(t *testing.T) {
	x := &fakeExec{}
	_, err := remote.New(x, nil).Run(context.Background(), box.Command{Argv: []string{"a"},
		Network: box.Network{Allow: []string{"api.test"}, Inspect: func(box.EgressRequest) error { return nil }}})
	if !errors.Is(err, box.ErrUnsupported) || x.got.Command.Argv != nil {
		t.Fatalf("err %v; the executor got %+v", err, x.got)
	}
}
