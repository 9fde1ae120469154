package gvisor_test

import (
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

// TestConformance runs the box contract against gVisor (runsc) for real.
func TestConformance(t *testing.T) {
	newBox := func(t *testing.T, cfg gvisor.Config) box.Box {
		b, err := gvisor.New(cfg)
		return boxtest.Available(t, b, err)
	}
	boxtest.Run(t, boxtest.Backend{
		Name: "gvisor", CLI: "gvisor",
		New:        func(t *testing.T) box.Box { return newBox(t, gvisor.Config{}) },
		WithEgress: func(t *testing.T, e box.EgressFunc) box.Box { return newBox(t, gvisor.Config{Egress: e}) },
		Posture:    box.Posture{Backend: "gvisor", Isolation: box.IsolationGVisor, Trust: box.TrustHost},
	})
}
