package glovebox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the root package's dependencies deliberate: the standard
// library, its own internal packages, wasmtime-go (for the library it
// links), golang.org/x/sys and klauspost/compress (S2, which compresses
// suspended states five times faster than DEFLATE: RATIONALE.md, "Why
// are states sealed with AES-256-GCM, compressed first, with key ids?")
// and golang.org/x/text (NFKD, to find labelled values written in
// look-alike characters: docs/dataflow.md).
// CLI and optional pieces stay out.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	allowed := []string{
		"github.com/gloveboxhq/glovebox",
		"github.com/bytecodealliance/wasmtime-go/v39",
		"golang.org/x/sys/",
		"github.com/klauspost/compress/",
		"golang.org/x/text/unicode/norm",
		"golang.org/x/text/transform",
	}
	for _, dep := range strings.Fields(string(out)) {
		ok := false
		for _, a := range allowed {
			if dep == a || strings.HasPrefix(dep, a+"/") || (strings.HasSuffix(a, "/") && strings.HasPrefix(dep, a)) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("the glovebox package depends on %s", dep)
		}
	}
}
