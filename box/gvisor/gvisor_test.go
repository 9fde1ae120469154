package gvisor_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

func requiresRunsc(t *testing.T) *gvisor.Box {
	t.Helper()
	b, err := gvisor.New(gvisor.Config{})
	if errors.Is(err, box.ErrUnavailable) {
		t.Skipf("runsc is not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func run(t *testing.T, b box.Box, c box.Command) *box.Result {
	t.Helper()
	res, err := b.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// TestGVisorRunsAsNobody: the command runs as uid 65534 inside the
// sandbox (the rest of the contract: the boxtest suite).
func TestGVisorRunsAsNobody(t *testing.T) {
	b := requiresRunsc(t)
	res := run(t, b, box.Command{Shell: "id -u"})
	if res.Stdout != "65534\n" || res.ExitStatus != 0 {
		t.Errorf("%+v", res)
	}
}
