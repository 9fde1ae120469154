// Package shipped is the list of compiled modules a release build ships
// beside the glovebox binary, as the build stamps it into that binary
// (-ldflags -X) and the engine reads it back: "name=sha256" pairs, the
// file name and the hex SHA-256 of its content, separated by commas. It
// has no cgo, so the release tool can use it without linking wasmtime.
package shipped

import (
	"path/filepath"
	"sort"
	"strings"
)

// SumsVar is the linker symbol the release build sets with -X: the
// engine's list of shipped modules (empty in a build from source).
const SumsVar = "github.com/gloveboxhq/glovebox/internal/engine.shippedSums"

// Format is the value stamped for sums (file name to hex SHA-256), in
// name order.
func Format(sums map[string]string) string {
	var names []string
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n + "=" + sums[n])
	}
	return b.String()
}

// Parse reads Format's output back. A pair without a plain file name
// (a path, or empty) or without a 64-digit hash is dropped.
func Parse(s string) map[string]string {
	out := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		name, sum, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && name != "" && name != "." && name != ".." && filepath.Base(name) == name && len(sum) == 64 {
			out[name] = strings.ToLower(sum)
		}
	}
	return out
}
