package box_test

import (
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
)

// TestNullConformance runs the box contract against the null box, which
// refuses every run with ErrDisabled.
func TestNullConformance(t *testing.T) {
	cannot := boxtest.Fake("the null box runs nothing")
	cannot[boxtest.Results] = "the null box refuses every run with ErrDisabled"
	boxtest.Run(t, boxtest.Backend{
		Name:    "null",
		New:     func(t *testing.T) box.Box { return box.Null{} },
		Posture: box.Posture{Backend: "null", Isolation: box.IsolationNone, Trust: box.TrustNone},
		Cannot:  cannot,
	})
}
