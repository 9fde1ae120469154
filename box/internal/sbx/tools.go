package sbx

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/gloveboxhq/glovebox/box"
)

// GuestRun is where a box's run directory (tool socket, client libraries,
// egress proxy socket) appears inside the sandbox, read-only.
const GuestRun = "/run/glovebox"

// MaxFrame bounds one request frame of the tool wire format: 1 MiB of
// arguments (glovebox's default Limits.ToolPayload) plus the tool name.
const MaxFrame = 1<<20 + 1024

// MaxConns is how many tool-socket connections one run serves at once;
// later ones wait in the listen backlog until one closes. With MaxFrame
// it bounds the host memory a command can make the server hold:
// 8 × (1 MiB + a 64 KiB read buffer), whatever the box's own limits.
const MaxConns = 8

//go:embed lib/glovebox_tools.py
var pyLib []byte

//go:embed lib/glovebox_tools.rb
var rbLib []byte

// ServeTools listens on hostDir/tools.sock for c.Tools, writes the client
// libraries into hostDir/lib, and returns a stop function (it closes the
// listener and waits for the connections) and the guest's environment:
// GLOVEBOX_TOOLS, PYTHONPATH and RUBYLIB.
func ServeTools(ctx context.Context, c *box.Command, hostDir, guestDir string) (stop func(), env []string, err error) {
	lib := filepath.Join(hostDir, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		return nil, nil, err
	}
	os.WriteFile(filepath.Join(lib, "glovebox_tools.py"), pyLib, 0o644)
	os.WriteFile(filepath.Join(lib, "glovebox_tools.rb"), rbLib, 0o644)
	sock := filepath.Join(hostDir, "tools.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, fmt.Errorf("box: tool socket: %w", err)
	}
	os.Chmod(sock, 0o777)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		slots := make(chan struct{}, MaxConns)
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[conn] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				ServeConn(ctx, conn, c.Tools)
				mu.Lock()
				delete(conns, conn)
				mu.Unlock()
			}()
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			ln.Close()
			mu.Lock()
			for conn := range conns {
				conn.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	env = []string{
		"GLOVEBOX_TOOLS=" + guestDir + "/tools.sock",
		"PYTHONPATH=" + guestDir + "/lib",
		"RUBYLIB=" + guestDir + "/lib",
	}
	return stop, env, nil
}

// ServeConn answers the frames of one connection until it closes or
// breaks the format. A frame is a decimal byte count, a newline, and that
// many bytes. A request is "call\n<name>\n<args>" (args: the wire form of
// [positional, keyword], or nothing) or "list"; the reply is the Tools'
// reply frame, or for list "j\n" and a JSON array of names.
func ServeConn(ctx context.Context, conn net.Conn, t box.Tools) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		body, err := ReadFrame(r, MaxFrame)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				WriteFrame(conn, []byte("err\nArgumentError\n"+err.Error()))
			}
			return
		}
		var reply []byte
		op, rest, _ := cut(body)
		switch string(op) {
		case "call":
			name, args, _ := cut(rest)
			reply = t.Call(ctx, string(name), args)
		case "list":
			reply = []byte("j\n[")
			for i, n := range t.Names() {
				if i > 0 {
					reply = append(reply, ',')
				}
				reply = strconv.AppendQuote(reply, n)
			}
			reply = append(reply, ']')
		default:
			reply = []byte("err\nArgumentError\nunknown request (want call or list)")
		}
		if err := WriteFrame(conn, reply); err != nil {
			return
		}
	}
}

func cut(b []byte) (before, after []byte, found bool) {
	for i, c := range b {
		if c == '\n' {
			return b[:i], b[i+1:], true
		}
	}
	return b, nil, false
}

// ReadFrame reads one frame of at most max bytes.
func ReadFrame(r *bufio.Reader, max int) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, errors.New("frame length line too long")
		}
		if len(line) == 0 {
			return nil, io.EOF
		}
		return nil, err
	}
	n, err := strconv.Atoi(string(line[:len(line)-1]))
	if err != nil || n < 0 {
		return nil, errors.New("malformed frame length")
	}
	if n > max {
		return nil, fmt.Errorf("frame of %d bytes, over the %d-byte limit", n, max)
	}
	// The buffer grows with the bytes that arrive, not with the length a
	// peer announces: a header alone costs nothing.
	var b bytes.Buffer
	if _, err := io.CopyN(&b, r, int64(n)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, b []byte) error {
	out := strconv.AppendInt(nil, int64(len(b)), 10)
	out = append(out, '\n')
	out = append(out, b...)
	_, err := w.Write(out)
	return err
}

// ProxyEnv is the guest environment that routes HTTP(S) through the
// egress proxy, which listens on 127.0.0.1:3128 inside the sandbox's
// own network namespace.
func ProxyEnv() []string {
	p := "http://127.0.0.1:3128"
	return []string{"HTTP_PROXY=" + p, "HTTPS_PROXY=" + p, "http_proxy=" + p, "https_proxy=" + p}
}
