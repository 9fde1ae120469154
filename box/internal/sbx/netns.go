package sbx

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/box"
)

// Netns is a fresh network namespace holding only a loopback interface,
// made by this process for one run: a sandbox that joins it (by Path) has
// no route anywhere but to the listeners the host opened in it.
type Netns struct {
	// Path names the namespace for a runtime that joins it:
	// /proc/PID/fd/N of this process's handle on it.
	Path string
	file *os.File
}

// NewNetns makes a network namespace with loopback up and opens a TCP
// listener on addr (such as 127.0.0.1:3128) inside it. It needs
// CAP_SYS_ADMIN (root). The thread that enters the namespace is locked
// and, should it fail to come back, ends with its goroutine instead of
// serving other goroutines.
func NewNetns(addr string) (*Netns, net.Listener, error) {
	type result struct {
		ns  *Netns
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fail := func(err error) { runtime.UnlockOSThread(); ch <- result{err: err} }
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			fail(err)
			return
		}
		defer self.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			fail(fmt.Errorf("a new network namespace: %w", err))
			return
		}
		r := result{}
		back := func() {
			if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			} // else: the thread stays locked and exits with this goroutine
			ch <- r
		}
		defer back()
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			r.err = err
			return
		}
		if err := loopbackUp(); err != nil {
			f.Close()
			r.err = fmt.Errorf("loopback up: %w", err)
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			f.Close()
			r.err = err
			return
		}
		r.ns = &Netns{Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()), file: f}
		r.ln = ln
	}()
	r := <-ch
	return r.ns, r.ln, r.err
}

// Close releases this process's handle; the namespace goes when nothing
// else holds it.
func (n *Netns) Close() error { return n.file.Close() }

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// EgressNetns sets up c's allowlist for a backend that joins a namespace
// by path (gVisor, Podman): a fresh network namespace holding only
// loopback and the egress proxy on 127.0.0.1:3128 (ProxyEnv's address),
// the proxy adding c's proxy-mode credentials. The returned cleanup stops
// the proxy, closes the namespace and releases the dialer, in that order;
// on error nothing is left to clean up.
func EgressNetns(ctx context.Context, egress box.EgressFunc, c *box.Command) (*Netns, func(), error) {
	dial, release, err := egress(c.Network.Allow)
	if err != nil {
		return nil, nil, fmt.Errorf("box: egress proxy: %w", err)
	}
	creds, err := ProxyCreds(ctx, c)
	if err != nil {
		release()
		return nil, nil, err
	}
	ns, ln, err := NewNetns("127.0.0.1:3128")
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("box: egress proxy's network namespace: %w", err)
	}
	stop := ServeProxy(ctx, ln, dial, creds, c.Network.Inspect)
	return ns, func() { stop(); ns.Close(); release() }, nil
}
