package glovebox_test

import (
	"fmt"
	"os"
	"path/filepath"
)

// privateScratch is the directory under a Config.ScratchDir where this
// user's scratch directories go.
func privateScratch(base string) string {
	return filepath.Join(base, fmt.Sprintf("glovebox-%d", os.Geteuid()))
}
