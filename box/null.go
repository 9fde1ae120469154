package box

import (
	"context"
	"fmt"
)

// Null is the disabled box: every Run fails with ErrDisabled. Use it where
// a configuration must name a box but running code is switched off.
type Null struct{}

var _ Box = Null{}

// Run returns an error wrapping ErrDisabled and runs nothing.
func (Null) Run(ctx context.Context, c Command) (*Result, error) {
	return nil, fmt.Errorf("%w: the null box runs nothing", ErrDisabled)
}

// Posture is (none, none).
func (Null) Posture() Posture {
	return Posture{Backend: "null", Isolation: IsolationNone, Trust: TrustNone}
}
