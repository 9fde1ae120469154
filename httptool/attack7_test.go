package httptool

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// rawServer is a loopback server that reads each request head and hands
// the connection to h, for responses net/http's server would not send.
func rawServer(t *testing.T, h func(c net.Conn, req *http.Request)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				h(c, req)
			}()
		}
	}()
	return ln.Addr().String()
}

// guestMessage is the message the guest sees for err.
func guestMessage(t *testing.T, err error) string {
	t.Helper()
	var te *glovebox.ToolError
	if !errors.As(err, &te) {
		t.Fatalf("not a ToolError: %v", err)
	}
	return te.Message
}

// TestNetworkErrorsHideAddresses: a connection that fails on the way
// must not tell the guest the address the name resolved to, nor the
// host's own address (net.OpError prints "read tcp LOCAL->REMOTE"); the
// audit entry keeps them.
func TestNetworkErrorsHideAddresses(t *testing.T) {
	// A reset in the middle of the body.
	addr := rawServer(t, func(c net.Conn, req *http.Request) {
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"))
		c.(*net.TCPConn).SetLinger(0) // close sends RST
	})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{})
	f.dial.server = addr
	_, err := f.call("http_get", "http://api.example.com/")
	wantClass(t, err, ClassTransport)
	if msg := guestMessage(t, err); strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "connection reset") {
		t.Errorf("guest message %q", msg)
	}
	if a := f.audit[0].Addr; a != netip.MustParseAddrPort("93.184.216.34:80") {
		t.Errorf("audit address %v", a)
	}

	// A refused connection through the real dialer, to a trusted
	// internal address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	tool, err := New(Config{
		AllowHosts: []string{"svc.internal.test"}, Ports: []int{port},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:        newResolver("svc.internal.test", []string{"127.0.0.1"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = callTool(tool, "http_get", glovebox.Args{Positional: []any{"http://svc.internal.test:" + strconv.Itoa(port) + "/"}})
	wantClass(t, err, ClassTransport)
	if msg := guestMessage(t, err); strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "connection refused") {
		t.Errorf("guest message %q", msg)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("the host-side error %q does not say which address failed", err)
	}
	_ = context.Background
}
