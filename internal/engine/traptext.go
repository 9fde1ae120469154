package engine

import "strings"

// trapText is the part of a wasmtime error message that may reach a guest
// or a log: wasmtime's text with any Rust stack backtrace cut off (it
// appends one, full of host paths, when RUST_BACKTRACE is set in the host's
// environment) and NUL bytes dropped.
func trapText(msg string) string {
	for _, marker := range []string{"\nStack backtrace:", "\nstack backtrace:"} {
		if i := strings.Index(msg, marker); i >= 0 {
			msg = msg[:i]
		}
	}
	return strings.ReplaceAll(msg, "\x00", "")
}
