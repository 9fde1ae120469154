package executor

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// eventStream writes an NDJSON event stream: status 200, one JSON object
// per line, flushed after each event so the client sees output as the
// command writes it. Evals use it for their own event types.
type eventStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	enc *json.Encoder
	err error
}

func newEventStream(w http.ResponseWriter) *eventStream {
	w.Header().Set("Content-Type", wire.ContentTypeNDJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &eventStream{w: w, rc: http.NewResponseController(w), enc: enc}
}

// send writes ev and flushes, within streamWriteTimeout. After the first
// failure (the client went away, or stopped reading) it does nothing and
// returns that error.
func (s *eventStream) send(ev *wire.Event) error {
	if s.err != nil {
		return s.err
	}
	s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if s.err = s.enc.Encode(ev); s.err == nil {
		s.err = s.rc.Flush()
	}
	if s.err == nil {
		s.rc.SetWriteDeadline(time.Time{}) // none while the job is quiet
	}
	return s.err
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
