package bwrap

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/internal/sbx"
)

// egressRun is one run's proxy: bwrap reports its child's pid on the info
// pipe and waits on the block pipe; meanwhile the host opens a listener
// inside the child's network namespace and serves the proxy on it.
type egressRun struct {
	dial           sbx.DialFunc
	creds          map[string]sbx.HeaderCred
	inspect        func(box.EgressRequest) error // Network.Inspect
	infoR, infoW   *os.File
	blockR, blockW *os.File
	stop           func()
}

func (e *egressRun) prepare(cmd *exec.Cmd) error {
	var err error
	if e.infoR, e.infoW, err = os.Pipe(); err != nil {
		return err
	}
	if e.blockR, e.blockW, err = os.Pipe(); err != nil {
		return err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, e.infoW, e.blockR) // fds 4 and 5
	return nil
}

func (e *egressRun) close() {
	for _, f := range []*os.File{e.infoR, e.infoW, e.blockR, e.blockW} {
		if f != nil {
			f.Close()
		}
	}
	if e.stop != nil {
		e.stop()
	}
}

// start runs after bwrap started: it reads the child pid, listens in the
// child's network namespace and lets the command go.
func (e *egressRun) start(ctx context.Context) error {
	e.infoW.Close()
	e.blockR.Close()
	e.infoW, e.blockR = nil, nil
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	e.infoR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewDecoder(e.infoR).Decode(&info); err != nil || info.ChildPID <= 0 {
		return fmt.Errorf("box: bwrap reported no child pid: %v", err)
	}
	ln, err := listenIn(info.ChildPID, "127.0.0.1:3128")
	if err != nil {
		return fmt.Errorf("box: egress proxy listener: %w", err)
	}
	e.stop = sbx.ServeProxy(ctx, ln, e.dial, e.creds, e.inspect)
	_, err = e.blockW.Write([]byte{1})
	return err
}

// listenIn opens a TCP listener in the network namespace of pid. The
// thread that enters the namespace is locked and, should it fail to come
// back, ends with its goroutine instead of serving other goroutines.
func listenIn(pid int, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer self.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		var ln net.Listener
		// bwrap brings the loopback interface up in the child; retry
		// until 127.0.0.1 exists there.
		for i := 0; i < 200; i++ {
			if ln, err = net.Listen("tcp", addr); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and exits with this goroutine
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
