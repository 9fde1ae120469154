package sbx

import (
	"strings"

	"github.com/gloveboxhq/glovebox/box"
)

// Exit statuses of a command the sandbox could not execute, the shell's
// convention (POSIX sh, bash): not found, and found but not executable.
const (
	ExitNotFound      = 127
	ExitNotExecutable = 126
)

// NotExecuted rewrites res for a command whose program name could not be
// executed: notFound gives exit status 127 and "glovebox: NAME: command
// not found", else 126 and "glovebox: NAME: cannot execute: REASON". The
// backend's own wording of the failure is dropped, so both OS backends
// say the same.
func NotExecuted(res *box.Result, name string, notFound bool, reason string) {
	res.Stdout, res.StdoutTruncated, res.StderrTruncated = "", false, false
	if notFound {
		res.ExitStatus = ExitNotFound
		res.Stderr = "glovebox: " + name + ": command not found\n"
		return
	}
	res.ExitStatus = ExitNotExecutable
	res.Stderr = "glovebox: " + name + ": cannot execute: " + strings.ToLower(strings.TrimSpace(reason)) + "\n"
}

// MayStart reports whether b and prefix agree on their common length: b
// may yet turn out to start with prefix.
func MayStart(b []byte, prefix string) bool {
	n := min(len(b), len(prefix))
	return string(b[:n]) == prefix[:n]
}
