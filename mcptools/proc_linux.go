package mcptools

import "syscall"

// setDeathSignal has the kernel SIGKILL the child when the host dies.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
