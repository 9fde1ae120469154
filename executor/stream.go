package executor

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// eventStream writes an NDJSON event stream: status 200, one JSON object
// per line. send flushes after each event, so the client sees output as
// the command writes it; write only buffers (follow flushes its accepted
// and holder events with the next event, or after acceptedDelay, see
// follow). Evals use it for their own event types.
type eventStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
	enc *json.Encoder
	err error
	// unflushed is the bytes written since the last flush; armed is set
	// while a write deadline is set on the stream.
	unflushed int
	armed     bool
}

func newEventStream(w http.ResponseWriter) *eventStream {
	w.Header().Set("Content-Type", wire.ContentTypeNDJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	st := &eventStream{w: w, rc: http.NewResponseController(w)}
	st.enc = json.NewEncoder(&st.buf)
	st.enc.SetEscapeHTML(false)
	return st
}

// unblocked is how many bytes a response writer takes into its buffer
// without writing to the connection, so without a write deadline: the
// smaller of net/http's buffers (HTTP/1's 2 KiB before chunking; HTTP/2
// buffers 4 KiB).
const unblocked = 2 << 10

// send writes ev and flushes, within streamWriteTimeout. After the first
// failure (the client went away, or stopped reading) it does nothing and
// returns that error.
func (s *eventStream) send(ev *wire.Event) error {
	if s.write(ev) == nil {
		s.flush()
	}
	return s.err
}

// write adds ev to the stream without flushing it: it stays in the
// response writer's buffer (written out when that fills) until flush,
// another send, or the handler's return (net/http flushes it with the
// end of the stream). A write that may reach the connection sets the
// write deadline first.
func (s *eventStream) write(ev *wire.Event) error {
	if s.err != nil {
		return s.err
	}
	s.buf.Reset()
	if s.err = s.enc.Encode(ev); s.err != nil {
		return s.err
	}
	return s.writeBuf()
}

// writeResult is write of the result event whose record's JSON is rec
// (json.Marshal of the wire.Record, as the store holds it): the same
// object as write would make, without encoding the record a second
// time (a `1+1` eval's record is most of its stream's bytes).
func (s *eventStream) writeResult(rec []byte) error {
	if s.err != nil {
		return s.err
	}
	s.buf.Reset()
	s.buf.WriteString(`{"type":"` + wire.EventResult + `","record":`)
	s.buf.Write(rec)
	s.buf.WriteString("}\n")
	return s.writeBuf()
}

// writeBuf writes the event line in buf (see write).
func (s *eventStream) writeBuf() error {
	if s.unflushed += s.buf.Len(); s.unflushed > unblocked {
		s.arm()
	}
	_, s.err = s.w.Write(s.buf.Bytes())
	if s.buf.Cap() > maxEventData*2 {
		s.buf = bytes.Buffer{} // a large record's buffer is not kept
	}
	return s.err
}

// flush sends what write buffered, within streamWriteTimeout from now.
func (s *eventStream) flush() error {
	if s.err != nil {
		return s.err
	}
	s.armed = false
	s.arm()
	s.err = s.rc.Flush()
	s.unflushed = 0
	return s.err
}

// arm sets the write deadline (streamWriteTimeout from now) unless set.
func (s *eventStream) arm() {
	if !s.armed {
		s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		s.armed = true
	}
}

// idle clears the write deadline before the stream waits for the job
// (none while the job is quiet). A deadline left set when the handler
// returns bounds net/http's last write; the stream's end stops it.
func (s *eventStream) idle() {
	if s.armed && s.err == nil {
		s.rc.SetWriteDeadline(time.Time{})
		s.armed = false
	}
}

// writeError refuses a request with code's HTTP status and the
// {"error": {...}} body.
func writeError(w http.ResponseWriter, e *wire.Error) {
	writeDeadline(w)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if e.Code == wire.CodeQueueFull || e.Code == wire.CodeUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if e.Code == wire.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="glovebox-executor"`)
	}
	w.WriteHeader(e.Code.HTTPStatus())
	json.NewEncoder(w).Encode(wire.ErrorBody{Error: e})
}

// writeDeadline bounds the writing of a whole answer (a record or an
// outputs file: megabytes) from now: a client that does not read it must
// not hold the handler forever.
func writeDeadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(streamWriteTimeout))
}

func writeJSON(w http.ResponseWriter, v any) {
	writeDeadline(w)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// streamWriteTimeout bounds one event's write and flush, and the writing
// of any other answer (a record, an outputs file): a client that
// stops reading its stream (or reads slower than this allows) has the
// stream dropped, rather than pinning a handler, a connection and the
// job's event log for as long as it likes. The job goes on; the client
// can attach again or read the record. Two minutes: our choice, enough
// to send the largest result record (two 4 MiB outputs in base64 and the
// outputs files) over a link of about 1 Mbit/s.
var streamWriteTimeout = 2 * time.Minute
