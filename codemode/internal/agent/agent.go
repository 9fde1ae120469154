// Package agent holds what the codemode adapters' agent loops share.
package agent

import (
	"fmt"

	"github.com/gloveboxhq/glovebox/codemode"
)

// MaxRounds returns the round limit a Run uses for maxRounds:
// codemode.DefaultMaxRounds for zero, maxRounds when positive; a negative
// value is a codemode.ErrInvalidConfig error.
func MaxRounds(maxRounds int) (int, error) {
	switch {
	case maxRounds == 0:
		return codemode.DefaultMaxRounds, nil
	case maxRounds < 0:
		return 0, fmt.Errorf("%w: maxRounds is %d; it must not be negative", codemode.ErrInvalidConfig, maxRounds)
	}
	return maxRounds, nil
}
