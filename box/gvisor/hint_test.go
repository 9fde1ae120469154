package gvisor

import (
	"errors"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
)

// TestStartErrorHint: the error for runsc failing as a user without root
// or a delegated cgroup (the trial's message, as runsc logged it) quotes
// runsc without its "running container: …" chain and says what to do.
func TestStartErrorHint(t *testing.T) {
	msg := `running container: creating container: cannot set up cgroup for root: configuring cgroup: write /sys/fs/cgroup/memory/glovebox/x/memory.limit_in_bytes: permission denied`
	err := startError(msg)
	if !errors.Is(err, box.ErrBackend) {
		t.Fatalf("%v does not wrap ErrBackend", err)
	}
	s := err.Error()
	if !strings.Contains(s, "creating container: cannot set up cgroup") || strings.Contains(s, "running container") || !strings.Contains(s, "needs root") {
		t.Errorf("error %q", s)
	}
}
