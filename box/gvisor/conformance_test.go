package gvisor_test

import (
	"errors"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

// TestConformance runs the box contract against gVisor (runsc) for real.
func TestConformance(t *testing.T) {
	newBox := func(t *testing.T, cfg gvisor.Config) box.Box {
		b, err := gvisor.New(cfg)
		if errors.Is(err, box.ErrUnavailable) {
			t.Skipf("runsc is not installed: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	boxtest.Run(t, boxtest.Backend{
		Name: "gvisor", CLI: "gvisor",
		New:        func(t *testing.T) box.Box { return newBox(t, gvisor.Config{}) },
		WithEgress: func(t *testing.T, e box.EgressFunc) box.Box { return newBox(t, gvisor.Config{Egress: e}) },
		Posture:    box.Posture{Backend: "gvisor", Isolation: box.IsolationGVisor, Trust: box.TrustHost},
	})
}
