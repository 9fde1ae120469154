package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxStdioMessage bounds one message read over stdio, in bytes (4 MiB,
// as DefaultMaxRequestBytes over HTTP).
const MaxStdioMessage = DefaultMaxRequestBytes

// RunStdio serves one MCP session over standard input and output until
// the client disconnects or ctx ends; see [Server.ServeIO].
func (s *Server) RunStdio(ctx context.Context) error {
	return s.ServeIO(ctx, os.Stdin, os.Stdout)
}

// ServeIO serves one MCP session over newline-delimited JSON-RPC read
// from r and written to w. Every line is checked before the SDK sees it,
// and a malformed one is answered and skipped while the session goes on:
// a line that is not JSON gets a parse error (-32700); one over
// MaxStdioMessage bytes, a bad id (not a string or an integer within
// ±(2^53-1)), a "jsonrpc" member other than "2.0", a request before
// initialize (unless its params._meta names MCP 2026-07-28, which has no
// initialize: server/discover and per-request _meta), a notification with an id, a request without one, a
// response that answers no request of the server, or a batch (under
// revisions from 2025-06-18, which have none) gets an invalid-request
// error (-32600); an unknown method gets -32601; params that are not an
// object, or missing required params, get -32602. The error's id is the
// message's when it can be read, else null. Unknown notifications are
// ignored, as JSON-RPC requires.
//
// When r ends (the client closed its end), every call still running is
// canceled (nobody is left to receive its result), and the session ends
// once every request read has been answered (at most [StdioDrain] later),
// so that `printf REQUESTS | glovebox mcp` gets its answers.
func (s *Server) ServeIO(ctx context.Context, r io.Reader, w io.Writer) error {
	out := &stdioWriter{w: w, pending: map[string]bool{}, inflight: map[string]bool{}}
	pr, pw := io.Pipe()
	ss, err := s.mcp.Connect(ctx, &mcp.IOTransport{Reader: pr, Writer: nopCloser{out}}, nil)
	if err != nil {
		return err
	}
	// gone ends with the input (or ctx); the session itself ends when the
	// SDK has read to the end, answering what it can.
	gone, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.gone[ss] = gone
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.gone, ss)
		s.mu.Unlock()
	}()
	client := sessionClient(ss)
	go filterMessages(r, pw, out, cancel, func(msgs []message, version string) (func() []byte, bool) {
		if !taskRouted(msgs, version, client) {
			return nil, false
		}
		return func() []byte { reply, _, _ := s.taskMessage(gone, msgs, version, nil, client); return reply }, true
	})
	err = ss.Wait()
	pr.Close()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
		err = nil
	}
	return err
}

// StdioDrain bounds how long [Server.ServeIO] waits, after its input
// ended, for the answers to the requests it read (5 s: the calls among
// them are canceled, which takes milliseconds).
const StdioDrain = 5 * time.Second

// stdioWriter serializes the SDK's writes and remembers the ids of the
// requests the server sent, so that a response to nothing is refused,
// and of the client's requests not answered yet.
type stdioWriter struct {
	mu       sync.Mutex
	w        io.Writer
	pending  map[string]bool // ids of the server's requests awaiting an answer
	inflight map[string]bool // ids of the client's requests not answered yet
	drained  chan struct{}   // closed when inflight empties, once asked for
}

func (l *stdioWriter) Write(p []byte) (int, error) {
	id, isReq, isResp := outgoing(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case isReq:
		l.pending[string(id)] = true
	case isResp:
		delete(l.inflight, string(id))
		if len(l.inflight) == 0 && l.drained != nil {
			close(l.drained)
			l.drained = nil
		}
	}
	return l.w.Write(p)
}

// began records a client request passed to the SDK.
func (l *stdioWriter) began(id json.RawMessage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight[string(id)] = true
}

// drain returns a channel closed when every client request has been
// answered.
func (l *stdioWriter) drain() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if len(l.inflight) == 0 {
		close(ch)
	} else {
		l.drained = ch
	}
	return ch
}

// answered reports whether id names a request of the server still
// awaiting an answer, and forgets it.
func (l *stdioWriter) answered(id json.RawMessage) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := l.pending[string(id)]
	delete(l.pending, string(id))
	return ok
}

// outgoing says whether msg, a message the server sends, is a request or
// a response, and its id.
func outgoing(msg []byte) (id json.RawMessage, isReq, isResp bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(msg, &m) != nil || len(m.ID) == 0 || string(m.ID) == "null" {
		return nil, false, false
	}
	return m.ID, m.Method != "", m.Method == ""
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// filterMessages copies the valid JSON-RPC messages of src to dst, one a
// line, answering the others on out (see [Server.ServeIO]).
// At the end of src, gone is called and dst closed once the requests
// read are answered.
// A task request is answered by tasks, which may wait (a tasks/result),
// so it runs on its own (the SDK has no such methods; tasks2025.go).
func filterMessages(src io.Reader, dst *io.PipeWriter, out *stdioWriter, gone func(), tasks func([]message, string) (func() []byte, bool)) {
	br := bufio.NewReaderSize(src, 64<<10)
	reply := func(b []byte) { out.Write(append(b, '\n')) }
	version, initialized := "", false
	for {
		line, tooLong, err := readLine(br, MaxStdioMessage)
		line = bytes.TrimSpace(line)
		switch {
		case tooLong:
			reply((&rpcError{code: CodeInvalidRequest, msg: fmt.Sprintf("invalid request: the message is over %d bytes, the limit of one message", MaxStdioMessage)}).encode())
		case len(line) == 0:
		default:
			c := checkPayload(line, version, initialized)
			if c.fwd {
				for _, m := range c.msgs {
					if m.isResponse() && !out.answered(m.id) {
						c.fwd = false
						c.reply = (&rpcError{code: CodeInvalidRequest, msg: fmt.Sprintf("invalid request: the response with id %s answers no request of this server", m.id)}).encode()
					}
					if m.method == "initialize" {
						version, initialized = negotiated(m.version), true
					}
				}
			}
			if answer, ok := tasks(c.msgs, version); c.fwd && ok {
				c.fwd = false
				go func() { reply(answer()) }()
			}
			if len(c.reply) > 0 {
				reply(c.reply)
			}
			if c.fwd {
				for _, m := range c.msgs {
					if m.id != nil && !m.isResponse() {
						out.began(m.id)
					}
				}
				line = liftTask(line, c.msgs, version)
				if _, werr := dst.Write(append(line, '\n')); werr != nil {
					gone()
					return
				}
			}
		}
		if err != nil {
			gone()
			select {
			case <-out.drain():
			case <-time.After(StdioDrain):
			}
			dst.CloseWithError(err)
			return
		}
	}
}

// readLine reads up to the next newline; a line longer than max is read
// to its end and discarded, and reported too long.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(line) == 0 && !tooLong {
			return nil, false, io.EOF
		}
		return line, tooLong, err
	}
}
