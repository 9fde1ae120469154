package bwrap_test

import (
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/bwrap"
)

// TestConformance runs the box contract against bubblewrap for real.
func TestConformance(t *testing.T) {
	boxtest.Run(t, boxtest.Backend{
		Name: "bwrap", CLI: "bwrap",
		New: func(t *testing.T) box.Box { return requiresBwrap(t) },
		WithEgress: func(t *testing.T, e box.EgressFunc) box.Box {
			b, err := bwrap.New(bwrap.Config{Egress: e})
			return boxtest.Available(t, b, err)
		},
		Posture: box.Posture{Backend: "bwrap", Isolation: box.IsolationNamespaces, Trust: box.TrustHost},
		// The working directory and the tool socket's directory are
		// bound from the run's host directory.
		HostMounts: []string{"/work", "/run/glovebox"},
	})
}
