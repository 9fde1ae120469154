package glovebox

import (
	"errors"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// passThrough lets a tool that only relays another toolset's answer — the
// executor's stand-in for a client's tool during a remote eval — give the
// guest exactly what the other side decided: an error raised with its own
// class (ArgumentError, UnknownToolError and TypeError included, which
// [ToolError] may not name) or an abort that ends the eval with its
// status (a tool budget spent on the client). Only code inside this
// module can build those internal values; a user's tool that returns an
// error gets the usual treatment.
func passThrough(err error) (*engine.GuestError, *engine.Abort) {
	var ge *engine.GuestError
	if errors.As(err, &ge) {
		return ge, nil
	}
	var ab *engine.Abort
	if errors.As(err, &ab) {
		return nil, ab
	}
	return nil, nil
}
