package glovebox_test

import (
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// At a limit the 4 GiB address space reaches first, running out of memory
// still ends as memory_limit; a NoMemoryError the guest raises itself
// while far from it stays an error.
func TestMemoryLimitAtAddressSpace(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Memory: 4 << 30})
	// capacity: reserves address space without touching host pages.
	res := eval(t, r, `a = String.new(capacity: 1500 << 20); b = String.new(capacity: 1500 << 20); c = String.new(capacity: 1500 << 20); 1`)
	wantStatus(t, res, glovebox.StatusMemoryLimit)
	res = eval(t, r, `raise NoMemoryError, "mine"`)
	wantStatus(t, res, glovebox.StatusError)
}
