//go:build !amd64 && !arm64

package seccomp

const auditArch = 0

var syscalls = map[string]int{}

var modeArgs = map[int]modeArg{}
