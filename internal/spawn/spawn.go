// Package spawn starts every process glovebox starts (the bubblewrap and
// gVisor commands, eval workers, MCP stdio servers, npm, a container
// engine's CLI): each child holds the descriptors it is given on purpose
// (stdin, stdout, stderr and exec.Cmd.ExtraFiles) and no other.
//
// Go opens every descriptor of its own close-on-exec, but a process can
// hold descriptors it inherited without that flag (a shell's "exec 7<file",
// a supervisor's sockets) or that C code opened; os/exec passes those on
// to every child. A sandboxed command then reads a host file through
// /proc/self/fd/N or writes into a host directory through a directory
// descriptor, past every mount the box set up. Start closes them in the
// child, between fork and exec, and leaves this process's own descriptors
// as they are.
//
// A test in this package fails when code of this module starts a process
// any other way (exec.Cmd's Start, Run, Output, CombinedOutput, or
// os.StartProcess, syscall.ForkExec and their kin).
package spawn

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// Start starts c as c.Start does, with every descriptor of this process
// that lacks close-on-exec closed in the child unless c passes it on
// purpose (as stdin, stdout or stderr, or in c.ExtraFiles). It does so by
// padding c.ExtraFiles with nil entries (os/exec closes the descriptor of
// a nil entry in the child) up to the highest such descriptor, for this
// call only. The errors are c.Start's.
//
// A descriptor another goroutine opens without close-on-exec while Start
// runs may still reach the child; Go's own calls always set the flag.
func Start(c *exec.Cmd) error {
	orig := c.ExtraFiles
	if top := highestInheritable(); top >= 3+len(orig) {
		pad := make([]*os.File, top+1-3)
		copy(pad, orig)
		c.ExtraFiles = pad
		defer func() { c.ExtraFiles = orig }()
	}
	return c.Start()
}

// Run is [Start], then c.Wait. The errors are theirs.
func Run(c *exec.Cmd) error {
	if err := Start(c); err != nil {
		return err
	}
	return c.Wait()
}

// Output is [Run] with c's stdout collected and returned; c.Stdout must be
// nil. The errors are Run's.
func Output(c *exec.Cmd) ([]byte, error) {
	if c.Stdout != nil {
		return nil, errors.New("spawn: Stdout already set")
	}
	var b bytes.Buffer
	c.Stdout = &b
	err := Run(c)
	return b.Bytes(), err
}

// CombinedOutput is [Run] with c's stdout and stderr collected together
// and returned; both must be nil. The errors are Run's.
func CombinedOutput(c *exec.Cmd) ([]byte, error) {
	if c.Stdout != nil || c.Stderr != nil {
		return nil, errors.New("spawn: Stdout or Stderr already set")
	}
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	err := Run(c)
	return b.Bytes(), err
}

// CloseOnExecAll sets close-on-exec on every descriptor above stderr that
// lacks it, so that no child of this process inherits one by accident,
// however it is started. A program that owns its whole process (the
// glovebox CLI) calls it first thing; a library must not, since the host
// program may mean its own children to inherit them, and relies on
// [Start] instead.
func CloseOnExecAll() {
	for _, fd := range inheritable() {
		unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
}

// highestInheritable is the highest descriptor above stderr that lacks
// close-on-exec, or -1.
func highestInheritable() int {
	top := -1
	for _, fd := range inheritable() {
		top = max(top, fd)
	}
	return top
}

// inheritable lists the descriptors above stderr that lack close-on-exec:
// those /proc/self/fd lists, or, without /proc, every number below the
// descriptor limit (at most 1<<16).
func inheritable() []int {
	var fds []int
	check := func(fd int) {
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fd)
		}
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range ents {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				check(fd)
			}
		}
		return fds
	}
	var lim unix.Rlimit
	n := uint64(1 << 16)
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		n = min(n, lim.Cur)
	}
	for fd := 3; fd < int(n); fd++ {
		check(fd)
	}
	return fds
}
