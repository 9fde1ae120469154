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
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

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
//
// A channel's frames are read two ways. Between requests, through Go's
// network poller (read): an idle channel holds no thread. While a tool
// call waits for the parent's answer, directly (readDirect): the thread
// running the guest blocks in poll(2) on the socket itself and the
// kernel wakes that thread when the answer comes, where a wait through
// the poller would wake another thread, hand it the answer and then hand
// the guest's thread (locked to its cgo call) the processor back: two
// more thread switches per call.
type conn struct {
	c   *net.UnixConn
	src io.Reader // what read fills the buffer from
	raw int       // the socket's descriptor, for readDirect; -1 without
	// wake is an eventfd a write to which ends a readDirect (interrupt).
	wake int
	// rc is the socket for watchHangup; nil without.
	rc syscall.RawConn

	buf  []byte // buf[r:w] is read and not yet taken
	r, w int

	wmu sync.Mutex
	// fds receives the descriptors that arrive with the data (the
	// control socket only), in order.
	fds *fdReader
}

func newConn(c *net.UnixConn, passFDs bool) *conn {
	k := &conn{c: c, src: c, raw: -1, wake: -1, buf: make([]byte, 16<<10)}
	if passFDs {
		k.fds = &fdReader{c: c}
		k.src = k.fds
		return k
	}
	if sc, err := c.SyscallConn(); err == nil {
		sc.Control(func(fd uintptr) { k.raw = int(fd) })
		k.rc = sc
	}
	if fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err == nil {
		k.wake = fd
	}
	return k
}

// close closes the socket and the wake descriptor.
func (k *conn) close() {
	k.c.Close()
	if k.wake >= 0 {
		unix.Close(k.wake)
		k.wake = -1
	}
}

// errInterrupted: readDirect was ended by interrupt.
var errInterrupted = errors.New("interrupted")

// errTimedOut: readDirect reached its deadline.
var errTimedOut = errors.New("timed out")

// read returns the next frame's type and payload (a fresh slice),
// waiting through the network poller. Errors: io.EOF at a clean end, a
// cut or oversized frame.
func (k *conn) read() (byte, []byte, error) { return k.next(false, time.Time{}) }

// readDirect is read on this thread (see conn), until deadline (zero:
// none; errTimedOut past it) or interrupt (errInterrupted). Only for a
// channel.
func (k *conn) readDirect(deadline time.Time) (byte, []byte, error) {
	if k.raw < 0 || k.wake < 0 {
		return k.next(false, time.Time{})
	}
	return k.next(true, deadline)
}

// interrupt ends a readDirect waiting now, or the next one.
func (k *conn) interrupt() {
	one := [8]byte{1} // an eventfd adds the 8 bytes as a number: any but zero wakes it
	unix.Write(k.wake, one[:])
}

// drainInterrupt forgets an interrupt no readDirect took.
func (k *conn) drainInterrupt() {
	var b [8]byte
	unix.Read(k.wake, b[:])
}

func (k *conn) next(direct bool, deadline time.Time) (byte, []byte, error) {
	if err := k.need(4, direct, deadline); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(k.buf[k.r:]))
	if n == 0 || n > maxFrame {
		return 0, nil, fmt.Errorf("a frame of %d bytes (1 to %d allowed)", n, maxFrame)
	}
	if err := k.need(4+n, direct, deadline); err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("a cut frame: %w", io.ErrUnexpectedEOF)
		}
		return 0, nil, err
	}
	t := k.buf[k.r+4]
	payload := append([]byte(nil), k.buf[k.r+5:k.r+4+n]...)
	k.r += 4 + n
	if k.r == k.w {
		k.r, k.w = 0, 0
		if len(k.buf) > 1<<20 { // a large frame's room is not kept
			k.buf = make([]byte, 16<<10)
		}
	}
	return t, payload, nil
}

// need reads until n bytes are buffered.
func (k *conn) need(n int, direct bool, deadline time.Time) error {
	for k.w-k.r < n {
		if len(k.buf)-k.r < n { // make room: move what is buffered to the front, grow
			if len(k.buf) < n {
				k.buf = append(make([]byte, 0, n+4096), k.buf[k.r:k.w]...)[:n+4096]
			} else {
				copy(k.buf, k.buf[k.r:k.w])
			}
			k.w -= k.r
			k.r = 0
		}
		var m int
		var err error
		if direct {
			m, err = k.fillDirect(k.buf[k.w:], deadline)
		} else {
			m, err = k.src.Read(k.buf[k.w:])
		}
		k.w += m
		if err != nil && k.w-k.r < n {
			return err
		}
	}
	return nil
}

// fillDirect waits in poll(2) for the socket or the wake descriptor,
// then reads.
func (k *conn) fillDirect(p []byte, deadline time.Time) (int, error) {
	for {
		timeout := -1
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return 0, errTimedOut
			}
			timeout = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		fds := []unix.PollFd{{Fd: int32(k.raw), Events: unix.POLLIN}, {Fd: int32(k.wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, timeout); err != nil {
			if err == unix.EINTR {
				continue
			}
			return 0, err
		}
		if fds[1].Revents != 0 {
			k.drainInterrupt()
			return 0, errInterrupted
		}
		if fds[0].Revents == 0 {
			continue // the timeout: checked above
		}
		m, err := unix.Read(k.raw, p)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case m == 0:
			return 0, io.EOF
		}
		return m, nil
	}
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
	codeUnknownHandle    = "unknown_handle"
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

	// bind, call; http_reset and unbind name a handle
	Bind   *bindSpec `json:"bind,omitempty"`
	Call   *callSpec `json:"call,omitempty"`
	Handle string    `json:"handle,omitempty"`
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
