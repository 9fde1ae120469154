// Package embed is the glovebox child the Ruby gem starts for itself
// (`glovebox embedded`, docs/embedded.md): it serves one parent process
// over sockets it inherits, runs that process's evals in its own wasm
// engine with the glovebox library, and sends every tool call back to
// the parent, which runs it.
//
// The protocol is a private contract between the gem and the binary of
// the same release, versioned by [Protocol]: the child refuses a parent
// speaking another version, naming both.
package embed

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// Protocol is the embedded protocol's version. The gem sends its own in
// its hello; a child of another version refuses it and exits. Bump it
// with any change a gem of the previous release would misread.
const Protocol = 1

// Frame types: the byte after a frame's length.
const (
	frameRequest = 'Q' // parent → child: a JSON request
	frameAnswer  = 'A' // parent → child: "<call id>\n<reply frame>" (clientwire.DecodeReply)
	frameReply   = 'R' // child → parent: a request's JSON answer
	frameError   = 'X' // child → parent: a request's refusal, {"code", "message"}
	frameCall    = 'C' // child → parent: "<id>\n<µs left>\n<name>\n<args>"
	frameStdout  = 'O' // child → parent: guest stdout as written
	frameStderr  = 'E' // child → parent: guest stderr as written
)

// maxFrame bounds one frame either way: 64 MiB, above the largest part
// an eval or a run carries by default (1 MiB of stdout, a tool answer
// of Limits.ToolPayload's 1 MiB, a run's files and outputs of a few).
const maxFrame = 64 << 20

// conn reads and writes frames on one socket. Reads are made by one
// goroutine at a time; writes are serialized, each frame in one write.
type conn struct {
	c   *net.UnixConn
	r   *bufio.Reader
	wmu sync.Mutex
	// fds receives the descriptors that arrive with the data (the
	// control socket only), in order.
	fds *fdReader
}

func newConn(c *net.UnixConn, passFDs bool) *conn {
	k := &conn{c: c}
	if passFDs {
		k.fds = &fdReader{c: c}
		k.r = bufio.NewReaderSize(k.fds, 64<<10)
	} else {
		k.r = bufio.NewReaderSize(c, 64<<10)
	}
	return k
}

// read returns the next frame's type and payload (a fresh slice).
// Errors: io.EOF at a clean end, a cut or oversized frame.
func (k *conn) read() (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(k.r, h[:4]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n == 0 || n > maxFrame {
		return 0, nil, fmt.Errorf("a frame of %d bytes (1 to %d allowed)", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(k.r, b); err != nil {
		return 0, nil, fmt.Errorf("a cut frame: %w", err)
	}
	return b[0], b[1:], nil
}

// write sends one frame of type t whose payload is the parts joined.
func (k *conn) write(t byte, parts ...[]byte) error {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	if n > maxFrame {
		return fmt.Errorf("a frame of %d bytes, over %d", n, maxFrame)
	}
	b := make([]byte, 5, 4+n)
	binary.BigEndian.PutUint32(b, uint32(n))
	b[4] = t
	for _, p := range parts {
		b = append(b, p...)
	}
	k.wmu.Lock()
	defer k.wmu.Unlock()
	_, err := k.c.Write(b)
	return err
}

// reply sends v as the JSON answer to a request.
func (k *conn) reply(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return k.refuse(refusef(codeInternal, "encoding the answer: %v", err))
	}
	return k.write(frameReply, b)
}

// refuse sends a request's refusal.
func (k *conn) refuse(r *refusal) error {
	b, _ := json.Marshal(r)
	return k.write(frameError, b)
}

// fdReader reads a Unix socket, keeping the descriptors that arrive with
// the data (SCM_RIGHTS) for take. Linux delivers a descriptor with the
// bytes it was sent with and ends the read there, so a frame's
// descriptor is queued by the time the frame has been read.
type fdReader struct {
	c   *net.UnixConn
	mu  sync.Mutex
	fds []int
}

func (f *fdReader) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := f.c.ReadMsgUnix(p, oob)
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, m := range msgs {
				if fds, err := unix.ParseUnixRights(&m); err == nil {
					f.mu.Lock()
					f.fds = append(f.fds, fds...)
					f.mu.Unlock()
				}
			}
		}
	}
	return n, err
}

// take returns the oldest descriptor received, or -1.
func (f *fdReader) take() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fds) == 0 {
		return -1
	}
	fd := f.fds[0]
	f.fds = f.fds[1:]
	return fd
}

// Refusal codes. The gem raises Glovebox::RunError for not_found,
// session_paused, state_refused and already_continued (an executor
// reports those as a failed record) and Glovebox::APIError for the
// others, as it does for an executor's.
const (
	codeBadRequest       = "bad_request"
	codeNotFound         = "not_found"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
	codeProtocol         = "protocol_mismatch"
	codeUnknownConfig    = "unknown_config"
	codeSessionPaused    = "session_paused"
	codeStateRefused     = "state_refused"
	codeAlreadyContinued = "already_continued"
	codeInvalidCommand   = "invalid_command"
	codeUnsupported      = "unsupported"
	codeBackend          = "backend_error"
)

// refusal is a request's refusal: nothing of it ran, except where the
// code says otherwise (backend_error: the run's sandbox failed to start).
type refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (r *refusal) Error() string { return r.Code + ": " + r.Message }

func refusef(code, format string, a ...any) *refusal {
	return &refusal{Code: code, Message: fmt.Sprintf(format, a...)}
}

// request is every request's JSON: op names it, and each op reads its
// own fields (docs/embedded.md). Unknown fields are refused.
type request struct {
	Op string `json:"op"`

	// hello
	Protocol int    `json:"protocol,omitempty"`
	Gem      string `json:"gem,omitempty"`
	StateKey string `json:"state_key,omitempty"` // 64 hex digits
	StateDir string `json:"state_dir,omitempty"`

	// config
	Config *sandboxConfig `json:"config,omitempty"`

	// eval, continue, session_open
	SID     uint64   `json:"sid,omitempty"`
	Code    *string  `json:"code,omitempty"`
	Key     string   `json:"key,omitempty"`
	Stdin   []byte   `json:"stdin,omitempty"`
	Args    []string `json:"args,omitempty"`
	Suspend []string `json:"suspend,omitempty"`
	Stream  bool     `json:"stream,omitempty"`
	Session string   `json:"session,omitempty"`
	From    string   `json:"from,omitempty"`
	Approve bool     `json:"approve,omitempty"`
	Deny    *string  `json:"deny,omitempty"`
	Reply   *string  `json:"reply,omitempty"`

	// session_close
	ID string `json:"id,omitempty"`

	// codemode
	CodeMode *clientwire.CodeModeRequest `json:"codemode,omitempty"`

	// run
	Run *runRequest `json:"run,omitempty"`
}

// decodeRequest parses a request frame's payload strictly.
func decodeRequest(b []byte) (*request, *refusal) {
	var q request
	if err := strictJSON(b, &q); err != nil {
		return nil, refusef(codeBadRequest, "a request that is not one JSON object of the documented shape: %v", err)
	}
	if q.Op == "" {
		return nil, refusef(codeBadRequest, "a request without an op")
	}
	return &q, nil
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}
