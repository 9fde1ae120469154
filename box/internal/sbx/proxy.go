package sbx

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DialFunc connects to the host and port of a URL, or refuses.
type DialFunc func(ctx context.Context, rawURL string) (net.Conn, error)

// ServeProxy is the egress proxy: an HTTP proxy on ln whose only way out
// is dial. CONNECT host:port is dialled as https://host:port/; a plain
// request for http://… is dialled as its URL and forwarded (one request per
// connection). A refusal answers 403 with dial's message. It returns a
// stop function that closes ln and every open connection.
func ServeProxy(ctx context.Context, ln net.Listener, dial DialFunc) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer track(c, false)
				proxyConn(ctx, c, dial, track)
			}()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			ln.Close()
			mu.Lock()
			for c := range open {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
}

func proxyConn(ctx context.Context, c net.Conn, dial DialFunc, track func(net.Conn, bool)) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	refuse := func(code int, msg string) {
		resp := &http.Response{StatusCode: code, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			Body: io.NopCloser(strings.NewReader(msg + "\n")), ContentLength: int64(len(msg) + 1), Close: true}
		resp.Write(c)
	}
	var target string
	if req.Method == http.MethodConnect {
		target = "https://" + req.Host + "/"
	} else if req.URL.Scheme == "http" {
		target = req.URL.String()
	} else {
		refuse(http.StatusBadRequest, "egress proxy: want CONNECT or an absolute http:// URL")
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	up, err := dial(dctx, target)
	cancel()
	if err != nil {
		refuse(http.StatusForbidden, "egress proxy: "+err.Error())
		return
	}
	track(up, true)
	defer track(up, false)
	defer up.Close()
	if req.Method == http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n")
	} else {
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		req.Close = true
		req.RequestURI = ""
		if err := req.Write(up); err != nil {
			return
		}
	}
	// For a plain request, the rest of br is the body req.Write already
	// sent; for CONNECT, it is the start of the tunnel.
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, br); closeWrite(up); done <- struct{}{} }()
	go func() { io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	type cw interface{ CloseWrite() error }
	if x, ok := c.(cw); ok {
		x.CloseWrite()
	}
}
