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
// from r and written to w. A line that is not JSON gets a parse error
// (-32700), one that is not a JSON-RPC message an invalid-request error
// (-32600), one over MaxStdioMessage bytes an invalid-request error too;
// each is answered and skipped, and the session goes on (the SDK alone
// would end it).
func (s *Server) ServeIO(ctx context.Context, r io.Reader, w io.Writer) error {
	out := &lockedWriter{w: w}
	pr, pw := io.Pipe()
	go filterMessages(r, pw, out)
	err := s.mcp.Run(ctx, &mcp.IOTransport{Reader: pr, Writer: nopCloser{out}})
	pr.Close()
	return err
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// filterMessages copies the JSON-RPC messages of src to dst, one a line,
// answering the lines that are not messages on out.
func filterMessages(src io.Reader, dst *io.PipeWriter, out io.Writer) {
	br := bufio.NewReaderSize(src, 64<<10)
	reply := func(id json.RawMessage, code int, msg string) {
		if id == nil {
			id = json.RawMessage("null")
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
		out.Write(append(b, '\n'))
	}
	for {
		line, tooLong, err := readLine(br, MaxStdioMessage)
		line = bytes.TrimSpace(line)
		switch {
		case tooLong:
			reply(nil, -32600, fmt.Sprintf("message over %d bytes", MaxStdioMessage))
		case len(line) == 0:
		case !json.Valid(line):
			reply(nil, -32700, "parse error: the line is not JSON")
		default:
			var m struct {
				JSONRPC string          `json:"jsonrpc"`
				Method  string          `json:"method"`
				ID      json.RawMessage `json:"id"`
				Result  json.RawMessage `json:"result"`
				Error   json.RawMessage `json:"error"`
			}
			if json.Unmarshal(line, &m) != nil || m.JSONRPC != "2.0" || (m.Method == "" && m.Result == nil && m.Error == nil) {
				reply(m.ID, -32600, "invalid request: not a JSON-RPC 2.0 message")
				break
			}
			if _, werr := dst.Write(append(line, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
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
