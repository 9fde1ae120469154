package box_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/container"
	"github.com/gloveboxhq/glovebox/box/e2b"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/box/microvm"
	"github.com/gloveboxhq/glovebox/box/remote"
)

type remoteOK struct{}

func (remoteOK) Isolation() box.Isolation { return box.IsolationGVisor }
func (remoteOK) Run(ctx context.Context, r remote.Request) (*box.Result, error) {
	return &box.Result{Stdout: "ok"}, nil
}

// TestTypedNilTools: box.Command{Tools: rt.ToolSession(0)} on a Runtime
// without tools (a nil *glovebox.ToolSession in the interface, the line
// the README shows) is a run without tools on every backend: no panic
// (bwrap's Run called Transcript on it after the command ran), no
// refusal for a tool socket the backend lacks, no GLOVEBOX_TOOLS.
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

	backends := map[string]box.Box{}
	if b, err := bwrap.New(bwrap.Config{}); err == nil {
		backends["bwrap"] = b
	} else {
		t.Logf("bwrap: %v (skipped)", err)
	}
	if b, err := gvisor.New(gvisor.Config{}); err == nil {
		backends["gvisor"] = b
	} else {
		t.Logf("gvisor: %v (skipped)", err)
	}
	cb, _ := container.New(container.Config{Image: "img", Runner: func(ctx context.Context, a []string) *exec.Cmd {
		return exec.Command("sh", "-c", `echo "${GLOVEBOX_TOOLS:-no tools}"`)
	}})
	backends["container"] = cb
	mb, _ := microvm.New(microvm.Config{Kernel: "/k", Rootfs: "/r", Runner: func(ctx context.Context, a []string, cfg []byte, c *box.Command) (*box.Result, error) {
		return &box.Result{Stdout: "no tools\n"}, nil
	}})
	backends["microvm"] = mb
	backends["remote"] = remote.New(remoteOK{}, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", 503) }))
	defer srv.Close()
	eb, err := e2b.New(e2b.Config{APIURL: srv.URL, EnvdURL: func(string) string { return srv.URL },
		APIKey: func(context.Context) (string, error) { return "k", nil }})
	if err != nil {
		t.Fatal(err)
	}
	backends["e2b"] = eb
	backends["null"] = box.Null{}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			res, err := b.Run(context.Background(), box.Command{Shell: `echo "${GLOVEBOX_TOOLS:-no tools}"`, Tools: none})
			switch {
			case errors.Is(err, box.ErrUnsupported):
				t.Fatalf("refused as if it had tools: %v", err)
			case name == "null" && errors.Is(err, box.ErrDisabled), name == "e2b" && err != nil:
				return // runs nothing / the fake service is down: it got past the check
			case err != nil:
				t.Fatal(err)
			}
			if res.ToolCalls != nil || (name != "remote" && res.Stdout != "no tools\n") {
				t.Errorf("stdout %q tool calls %s", res.Stdout, res.ToolCalls)
			}
		})
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
