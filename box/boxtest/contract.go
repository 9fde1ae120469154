package boxtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
)

// contract: what every backend promises, fakes included.
func (s *suite) contract(t *testing.T) {
	want := s.b.Posture
	// Posture: the box and its Results say the declared posture, and
	// RequireOffHost agrees with its trust.
	s.sub(t, "Posture", nil, func(t *testing.T, b box.Box) {
		if p := b.Posture(); p != want {
			t.Errorf("Posture() = %+v, want %+v", p, want)
		}
		err := box.RequireOffHost(b)
		if want.OffHost() && err != nil || !want.OffHost() && !errors.Is(err, box.ErrNotOffHost) {
			t.Errorf("RequireOffHost = %v for trust %q", err, want.Trust)
		}
		if !s.can(Results) {
			return
		}
		res := run(t, b, box.Command{Argv: []string{"true"}})
		if res.Posture != want || res.OffHost() != want.OffHost() {
			t.Errorf("the Result's posture %+v, want %+v", res.Posture, want)
		}
	})
	// InvalidCommand: a Command breaking a rule is refused before
	// anything runs.
	s.sub(t, "InvalidCommand", needs(Results), func(t *testing.T, b box.Box) {
		for name, c := range map[string]box.Command{
			"empty":          {},
			"bad file name":  {Shell: "true", Files: map[string][]byte{"../x": nil}},
			"nil credential": {Argv: []string{"true"}, Credentials: map[string]func(context.Context) (string, error){"TOKEN": nil}},
			"reserved mount": {Argv: []string{"true"}, Mounts: []box.Mount{{HostPath: "/srv", GuestPath: "/etc"}}},
		} {
			if _, err := b.Run(context.Background(), c); !errors.Is(err, box.ErrInvalidCommand) {
				t.Errorf("%s: Run = %v, want ErrInvalidCommand", name, err)
			}
		}
	})
	// TypedNilTools: Tools holding a nil *glovebox.ToolSession (what
	// rt.ToolSession(0) returns on a Runtime without tools, the line the
	// README shows) is a run without tools: no panic, no refusal for a
	// tool socket the backend lacks, no GLOVEBOX_TOOLS.
	s.sub(t, "TypedNilTools", nil, func(t *testing.T, b box.Box) {
		var none *glovebox.ToolSession
		res, err := b.Run(context.Background(), box.Command{Shell: `echo "${GLOVEBOX_TOOLS:-no tools}"`, Tools: none})
		switch {
		case errors.Is(err, box.ErrUnsupported):
			t.Fatalf("refused as if it had tools: %v", err)
		case !s.can(Results) && errors.Is(err, box.ErrDisabled):
			return // runs nothing, and got past the check
		case errors.Is(err, box.ErrBackend):
			t.Skipf("the sandbox cannot start here: %v", err)
		case err != nil:
			t.Fatal(err)
		}
		if res.ToolCalls != nil {
			t.Errorf("tool calls %s", res.ToolCalls)
		}
		if s.can(Exec) && res.Stdout != "no tools\n" {
			t.Errorf("stdout %q, want no GLOVEBOX_TOOLS", res.Stdout)
		}
	})
}

// hasEnforced reports whether a Result's Enforced names prefix (such as
// "pids:" or "memory:cgroup").
func hasEnforced(res *box.Result, prefix string) bool {
	return strings.Contains(","+strings.Join(res.Enforced, ","), ","+prefix)
}
