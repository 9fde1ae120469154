package mcptools

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
)

// The SDK decodes structuredContent into float64s, which rounds integers
// beyond 2^53. To hand the guest the server's exact numbers, a tap on the
// stdio stream reads the raw bytes as they pass (never changing them): each
// tools/call the binding sends carries a _meta marker, the tap notes the
// marker's request id, and keeps the raw result of the response with that
// id until the call collects it.

// callMarker is the _meta key that marks the binding's tools/call
// requests.
const callMarker = "io.glovebox/call"

// rawTap matches requests to responses by id and keeps raw results. It
// also caps the server's lines: one longer than the guard's
// MaxMessageBytes trips the guard and ends the stream.
type rawTap struct {
	g      *guard
	next   atomic.Int64
	mu     sync.Mutex
	ids    map[string]string          // JSON-RPC id → marker
	raw    map[string]json.RawMessage // marker → raw result
	inBuf  []byte
	outBuf []byte
}

func newRawTap(g *guard) *rawTap {
	return &rawTap{g: g, ids: map[string]string{}, raw: map[string]json.RawMessage{}}
}

// mark returns a fresh marker for one call.
func (t *rawTap) mark() string { return strconv.FormatInt(t.next.Add(1), 10) }

// take returns and forgets the raw result of the call marked m.
func (t *rawTap) take(m string) json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.raw[m]
	delete(t.raw, m)
	for id, mm := range t.ids {
		if mm == m {
			delete(t.ids, id)
		}
	}
	return r
}

// maxTapLine bounds one buffered line the host sends; a longer message
// is not tapped (its call falls back to the SDK's decoding).
const maxTapLine = 64 << 20

// lines feeds complete lines of p (appended to *buf) to f, buffering at
// most max bytes of a line: it reports false when a line is longer.
func lines(buf *[]byte, p []byte, max int, f func([]byte)) bool {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(*buf)+len(p) <= max {
				*buf = append(*buf, p...)
			} else {
				*buf = append((*buf)[:0], 0) // poisoned: dropped at the next newline
				return false
			}
			return true
		}
		if len(*buf)+i > max {
			*buf = (*buf)[:0]
			return false
		}
		if len(*buf) == 0 || (*buf)[0] != 0 {
			f(append(*buf, p[:i]...))
		}
		*buf = (*buf)[:0]
		p = p[i+1:]
	}
	return true
}

func (t *rawTap) sent(line []byte) {
	if !bytes.Contains(line, []byte(callMarker)) {
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil || m.ID == nil {
		return
	}
	if mk, ok := m.Params.Meta[callMarker].(string); ok {
		t.mu.Lock()
		t.ids[string(m.ID)] = mk
		t.mu.Unlock()
	}
}

func (t *rawTap) received(line []byte) {
	if !bytes.Contains(line, []byte("structuredContent")) {
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(line, &m) != nil || m.ID == nil || m.Result == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if mk, ok := t.ids[string(m.ID)]; ok {
		delete(t.ids, string(m.ID))
		t.raw[mk] = bytes.Clone(m.Result)
	}
}

// tapReader passes a server's output through, feeding its lines to the tap.
type tapReader struct {
	io.ReadCloser
	t *rawTap
}

func (r tapReader) Read(p []byte) (int, error) {
	if err := r.t.g.tripped(); err != nil {
		return 0, err
	}
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		r.t.g.received.Add(int64(n))
		r.t.mu.Lock()
		buf := r.t.inBuf
		r.t.mu.Unlock()
		ok := lines(&buf, p[:n], r.t.g.cfg.MaxMessageBytes, r.t.received)
		r.t.mu.Lock()
		r.t.inBuf = buf
		r.t.mu.Unlock()
		if !ok {
			return 0, r.t.g.trip("a line", "MaxMessageBytes", int64(r.t.g.cfg.MaxMessageBytes))
		}
	}
	return n, err
}

// tapWriter passes the client's messages through, feeding them to the tap.
type tapWriter struct {
	io.WriteCloser
	t  *rawTap
	mu *sync.Mutex
}

func (w tapWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	lines(&w.t.outBuf, p, maxTapLine, w.t.sent)
	w.mu.Unlock()
	return w.WriteCloser.Write(p)
}

// exactStructured decodes the structuredContent of a raw result with its
// numbers exact; ok is false when raw has none.
func exactStructured(raw json.RawMessage) (any, bool) {
	if raw == nil {
		return nil, false
	}
	var r struct {
		S json.RawMessage `json:"structuredContent"`
	}
	if json.Unmarshal(raw, &r) != nil || r.S == nil {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(r.S))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil, false
	}
	return v, true
}
