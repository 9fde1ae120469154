package sbx

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startProxy serves the egress proxy on a loopback listener with dial.
func startProxy(t *testing.T, dial DialFunc, creds map[string]HeaderCred) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := ServeProxy(context.Background(), ln, dial, creds, nil)
	t.Cleanup(stop)
	return ln.Addr().String()
}

// TestProxyHeadIsBounded: a guest streaming an endless header made the
// host proxy (http.ReadRequest, which has no limit of its own) buffer it
// all in host memory. A head over MaxProxyHeader is answered 431 and never
// dialled.
func TestProxyHeadIsBounded(t *testing.T) {
	var dialled atomic.Bool
	addr := startProxy(t, func(ctx context.Context, raw string) (net.Conn, error) {
		dialled.Store(true)
		return nil, errors.New("refused by the test")
	}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		io.WriteString(c, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-Big: ")
		chunk := strings.Repeat("a", 64<<10)
		for i := 0; i < 4*MaxProxyHeader/len(chunk); i++ {
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
		io.WriteString(c, "\r\n\r\n")
	}()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || dialled.Load() {
		t.Errorf("status %d, dialled %v; want 431 and no dial", resp.StatusCode, dialled.Load())
	}
}

// TestProxyConnectionsAreBounded: each guest connection held a host file
// descriptor and goroutine (two descriptors once dialled), so a guest could
// run the host process out of descriptors. At most MaxProxyConns are
// served at once; the rest wait and are served as others close.
func TestProxyConnectionsAreBounded(t *testing.T) {
	var now, peak atomic.Int32
	release := make(chan struct{})
	addr := startProxy(t, func(ctx context.Context, raw string) (net.Conn, error) {
		n := now.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		now.Add(-1)
		return nil, errors.New("refused by the test")
	}, nil)
	const extra = 16
	var wg sync.WaitGroup
	var served atomic.Int32
	for i := 0; i < MaxProxyConns+extra; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://example.com/%d HTTP/1.1\r\nHost: example.com\r\n\r\n", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusForbidden {
				served.Add(1)
			}
		}()
	}
	for now.Load() < MaxProxyConns {
		time.Sleep(10 * time.Millisecond)
	}
	// Give the proxy time to take more than its share, were it to.
	time.Sleep(time.Second)
	close(release)
	wg.Wait()
	if p := peak.Load(); p > MaxProxyConns {
		t.Errorf("%d connections dialling at once, over MaxProxyConns %d", p, MaxProxyConns)
	}
	if s := served.Load(); s != MaxProxyConns+extra {
		t.Errorf("%d of %d connections answered", s, MaxProxyConns+extra)
	}
}

// TestProxyRefusesTraceToCredentialHost: TRACE's answer echoes the
// request's headers, so a TRACE to a credentialed host would hand the
// guest the credential the proxy adds.
func TestProxyRefusesTraceToCredentialHost(t *testing.T) {
	var dialled atomic.Bool
	addr := startProxy(t, func(ctx context.Context, raw string) (net.Conn, error) {
		dialled.Store(true)
		return nil, errors.New("refused by the test")
	}, map[string]HeaderCred{"api.example.com": {Header: "Authorization", Value: "canary"}})
	for _, m := range []string{"TRACE", "trace"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "%s http://API.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", m)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body) // before Close: the body may not be buffered yet
		c.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "TRACE") || dialled.Load() {
			t.Errorf("%s: status %d %q, dialled %v; want 403 naming TRACE, no dial", m, resp.StatusCode, body, dialled.Load())
		}
	}
}

// TestProxyOneRequestPerConnection: bytes the guest wrote after a plain
// request (a pipelined second request naming another Host) were copied
// raw to the upstream, past the allowlist and, for a credentialed host,
// through the proxy's TLS connection. Only the first request is sent.
func TestProxyOneRequestPerConnection(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	rest := make(chan string, 1)
	go func() {
		c, err := up.Accept()
		if err != nil {
			rest <- err.Error()
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			rest <- err.Error()
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		c.(*net.TCPConn).CloseWrite()
		b, _ := io.ReadAll(br)
		rest <- string(b)
	}()
	addr := startProxy(t, func(ctx context.Context, raw string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", up.Addr().String())
	}, map[string]HeaderCred{"api.example.com": {Header: "Authorization", Value: "canary"}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://api.example.com/1 HTTP/1.1\r\nHost: api.example.com\r\n\r\nGET /2 HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "ok" {
		t.Errorf("answer %q", body)
	}
	c.Close()
	if r := <-rest; r != "" {
		t.Errorf("the upstream got more than the first request: %q", r)
	}
}

// TestReadOutputsBoundsFileCount: empty files cost nothing of the byte
// budget, so a command leaving a million of them made the host hold a
// million entries. At most MaxOutputFiles are read, and truncated is set.
func TestReadOutputsBoundsFileCount(t *testing.T) {
	w := &Workdir{Outputs: t.TempDir()}
	for i := 0; i < MaxOutputFiles+50; i++ {
		if err := os.WriteFile(filepath.Join(w.Outputs, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, truncated := w.ReadOutputs(1 << 20)
	if len(out) != MaxOutputFiles || !truncated {
		t.Errorf("%d files read, truncated %v; want %d and true", len(out), truncated, MaxOutputFiles)
	}
	if _, ok := out["f00000"]; !ok {
		t.Errorf("the first file in path order is missing")
	}
}
