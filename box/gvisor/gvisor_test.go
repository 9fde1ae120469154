package gvisor_test

import (
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

func requiresRunsc(t *testing.T) *gvisor.Box {
	t.Helper()
	b, err := gvisor.New(gvisor.Config{})
	return boxtest.Available(t, b, err)
}

var run = boxtest.MustRun

// TestGVisorRunsAsNobody: the command runs as uid 65534 inside the
// sandbox (the rest of the contract: the boxtest suite).
func TestGVisorRunsAsNobody(t *testing.T) {
	b := requiresRunsc(t)
	res := run(t, b, box.Command{Shell: "id -u"})
	if res.Stdout != "65534\n" || res.ExitStatus != 0 {
		t.Errorf("%+v", res)
	}
}
