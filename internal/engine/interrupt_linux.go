package engine

/*
#include <signal.h>
#include <string.h>

static void gb_interrupt_handler(int sig, siginfo_t *info, void *uctx) {
	(void)sig; (void)info; (void)uctx;
}

// gb_install_interrupt installs a handler that does nothing and, unlike
// the Go runtime's, is not SA_RESTART: a blocking system call the signal
// lands in fails with EINTR instead of being restarted.
static int gb_install_interrupt(int sig) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = gb_interrupt_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigfillset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL);
}
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// wasmtime opens a guest's file by name, after the guard has checked what
// the name is, and ignores the guest's NONBLOCK flag on open: a FIFO
// swapped in between (a host process or another VM flipping a symbolic
// link) makes the open wait for a peer, in the kernel, where no epoch
// reaches it. Such an open is bounded by the eval's deadline instead:
// once the deadline passes (or the eval's context ends) and until the
// open returns, a watchdog repeatedly
//
//   - opens whatever the name now resolves to beneath the same directory,
//     if it is a FIFO, with O_RDWR|O_NONBLOCK (never blocks) and closes it:
//     a peer arriving releases an open waiting on that FIFO; and
//   - sends the guest's thread interruptSignal, whose handler does nothing
//     and does not restart system calls: wasmtime retries an interrupted
//     open, resolving the name afresh, so a name moved back to a file, or
//     removed, ends the wait too.
//
// The guard then closes what was opened and ends the eval.
//
// interruptSignal is SIGRTMIN+6 as glibc numbers it (34+6): glibc keeps
// 32 and 33, and neither the Go runtime nor wasmtime uses real-time
// signals.
const interruptSignal = 40

var interruptInstall = sync.OnceValue(func() bool {
	return C.gb_install_interrupt(C.int(interruptSignal)) == 0
})

// interruptRetry is how often the watchdog acts while the open has not
// returned.
const interruptRetry = 5 * time.Millisecond

// boundOpen runs open, wasmtime's open of path beneath the host directory
// dir, on the current thread (the guest's), releasing it past v's
// deadline or when v's context ends. It reports whether the eval is over
// when open returns.
func (v *VM) boundOpen(dir int, path string, follow bool, open func()) (over bool) {
	if !interruptInstall() || (v.deadline.IsZero() && v.ctx == nil) {
		open()
		return false
	}
	tid, pid := unix.Gettid(), unix.Getpid()
	var returned atomic.Bool
	finished := make(chan struct{})
	var deadline <-chan time.Time
	if !v.deadline.IsZero() {
		t := time.NewTimer(time.Until(v.deadline))
		defer t.Stop()
		deadline = t.C
	}
	ctxDone := context.Background().Done()
	if v.ctx != nil {
		ctxDone = v.ctx.Done()
	}
	go func() {
		select {
		case <-finished:
			return
		case <-deadline:
		case <-ctxDone:
		}
		tick := time.NewTicker(interruptRetry)
		defer tick.Stop()
		for !returned.Load() {
			releaseFIFO(dir, path, follow)
			if !returned.Load() {
				unix.Tgkill(pid, tid, unix.Signal(interruptSignal))
			}
			select {
			case <-finished:
				return
			case <-tick.C:
			}
		}
	}()
	open()
	returned.Store(true)
	close(finished)
	return v.evalOver()
}

// releaseFIFO opens and closes the FIFO path names beneath dir, if it
// names one: a peer for an open waiting on it.
func releaseFIFO(dir int, path string, follow bool) {
	h, e := resolve(dir, path, follow)
	if e != errnoSuccess {
		return
	}
	defer unix.Close(h)
	var st unix.Stat_t
	if unix.Fstat(h, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return
	}
	if fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", h), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
	}
}

// evalOver reports whether the eval's deadline has passed or its context
// ended.
func (v *VM) evalOver() bool {
	return (!v.deadline.IsZero() && !time.Now().Before(v.deadline)) || (v.ctx != nil && v.ctx.Err() != nil)
}

// stopOver stops the guest for whichever ended the eval.
func (v *VM) stopOver() error {
	if v.ctx != nil && v.ctx.Err() != nil {
		return v.stop(StatusCanceled, "the caller's context ended: "+context.Cause(v.ctx).Error())
	}
	return v.stop(StatusTimeout, v.timeoutMessage())
}
