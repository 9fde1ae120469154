//go:build !linux

package mcptools

import "syscall"

// setDeathSignal does nothing where there is no Pdeathsig: the
// watchdog's lifeline alone ends the server when the host dies.
func setDeathSignal(*syscall.SysProcAttr) {}
