// Package client talks to a glovebox executor (package executor, the
// wire contract in EXECUTOR.md). A [*Client] is a box/remote Executor, so
//
//	c, err := client.Dial(ctx, client.Config{URL: "https://exec:8443", Token: tok, RootCAs: pool})
//	b := remote.New(c, nil) // a box.Box with trust remote: OffHost() is true
//	res, err := b.Run(ctx, box.Command{Argv: []string{"python3", "-c", "print(1)"}})
//
// runs the command on the executor, its output streamed to the Command's
// Stream as it is written.
//
// # Failures, idempotency and retries
//
// Every request carries an idempotency key: the caller's, or else a fresh
// random one, so a Run without a key always runs (the same command run
// three times runs three times). A caller who wants identical commands to
// share one run passes [Key] on purpose (remote.New(c, client.Key)). The
// executor records the key before it starts work and answers a repeat
// from its record (or attaches to the run in progress): it never runs a
// key twice. The client never retries on its own. An error is an
// [*Error]:
//
//   - InDoubt() true (it wraps remote.ErrInDoubt): the transport failed
//     after the request may have reached the executor; the command may be
//     running or done. Retry deliberately with the same key (Error.Key) to
//     get its outcome.
//   - InDoubt() false: the executor provably did not start it (connection
//     refused, a refusal such as queue_full), or gave a definite outcome
//     (lost, failed, run_expired). Code says which.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// Config says where the executor is and how to reach it.
type Config struct {
	// URL is the executor's base URL, "https://host:port".
	URL string
	// Token is the tenant's bearer token (glovebox executor token).
	// Surrounding white space, such as the newline ending a token file
	// read whole, is ignored.
	Token string
	// RootCAs verifies the executor's certificate; nil means the
	// system's roots.
	RootCAs *x509.CertPool
	// HTTPClient, when set, is used as is (RootCAs is then ignored).
	// Its Timeout should be zero: a run's stream lasts as long as the run.
	HTTPClient *http.Client
}

// Client is a connection to one executor for one tenant. It is safe for
// concurrent use.
type Client struct {
	base, token string
	hc          *http.Client
	info        wire.Info
}

var _ remote.Executor = (*Client)(nil)

// Dial checks the executor and the token (GET /v1/info) and returns a
// Client. Errors are *Error (unauthenticated, a transport failure).
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12}
		tr.ForceAttemptHTTP2 = true
		hc = &http.Client{Transport: tr}
	}
	c := &Client{base: strings.TrimRight(cfg.URL, "/"), token: strings.TrimSpace(cfg.Token), hc: hc}
	body, err := c.get(ctx, wire.PathInfo)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &c.info); err != nil {
		return nil, &Error{Code: "bad_response", Message: "GET /v1/info: " + err.Error()}
	}
	return c, nil
}

// Close releases the Client's idle connections to the executor (its
// HTTP client's CloseIdleConnections, Config.HTTPClient's too when one was
// given). It does not cancel runs: a Run still streaming keeps its
// connection until it returns, and the Client stays usable (a later call
// dials anew). It returns nil.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Isolation is the executor backend's isolation (from GET /v1/info).
func (c *Client) Isolation() box.Isolation { return box.Isolation(c.info.Isolation) }

// Backend is the executor's backend name ("bwrap", "gvisor").
func (c *Client) Backend() string { return c.info.Backend }

// Key is a key made from the command: "h-" and 32 hex digits of the
// SHA-256 of its wire form (local functions and credentials excluded).
// Neither the client nor the executor uses it unasked; pass it as
// remote.New's key function to have a command sent again within the
// executor's retention answered from the first run's record.
func Key(cmd *box.Command) string {
	w := wire.FromBox(cmd)
	return wire.DeriveKey(&w)
}

// Error is every error the client returns.
type Error struct {
	// Code is the executor's error code (EXECUTOR.md), or "transport"
	// when no answer came, or "bad_response".
	Code string
	// Status is the HTTP status of a refusal; 0 otherwise.
	Status int
	// Message explains; it never holds a credential or the token.
	Message string
	// Key is the idempotency key of the run; retry with it.
	Key     string
	inDoubt bool
	err     error
}

// Error is "executor: CODE: MESSAGE", followed by the key to retry with
// when the outcome is in doubt.
func (e *Error) Error() string {
	msg := "executor: " + e.Code + ": " + e.Message
	if e.inDoubt {
		msg += fmt.Sprintf(" (in doubt: the run may have happened; retry with idempotency key %s to learn its outcome)", e.Key)
	}
	return msg
}

// InDoubt reports whether the command may have run (or may be running)
// although no outcome arrived.
func (e *Error) InDoubt() bool { return e.inDoubt }

// Unwrap gives remote.ErrInDoubt when in doubt, and the transport error.
func (e *Error) Unwrap() []error {
	var out []error
	if e.inDoubt {
		out = append(out, remote.ErrInDoubt)
	}
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

// Run runs req.Command on the executor under req.IdempotencyKey (or a
// fresh random key "r-" and 32 hex digits when it is empty: the key of
// an error, Error.Key, is the one to retry with) and returns its Result; stdout and stderr go to
// req.Stream as they arrive (for a run that had already finished under
// the key, answered from its record, the recorded stdout then stderr). A deadline on ctx becomes the request's
// expires_at: the executor refuses it, or does not start it, after then.
// Errors are *Error; see the package doc for InDoubt.
func (c *Client) Run(ctx context.Context, req remote.Request) (*box.Result, error) {
	wr := wire.RunRequest{Command: wire.FromBox(&req.Command), IdempotencyKey: req.IdempotencyKey, Credentials: req.Credentials}
	if wr.IdempotencyKey == "" {
		wr.IdempotencyKey = wire.NewKey("r-")
	}
	if d, ok := ctx.Deadline(); ok {
		wr.ExpiresAt = &d
	}
	key := wr.IdempotencyKey
	body, err := json.Marshal(&wr)
	if err != nil {
		return nil, &Error{Code: "bad_request", Message: err.Error(), Key: key}
	}
	var rec *wire.Record
	streamed := false
	err = c.stream(ctx, wire.PathRuns, body, key, func(ev *wire.Event) error {
		switch ev.Type {
		case wire.EventStdout, wire.EventStderr:
			streamed = true
			if req.Stream != nil {
				n := 1
				if ev.Type == wire.EventStderr {
					n = 2
				}
				req.Stream(n, ev.Data)
			}
		case wire.EventResult:
			rec = ev.Record
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A run that had finished is answered from its record, with no output
	// events: Stream still sees its output (stdout, then stderr).
	if !streamed && req.Stream != nil && rec != nil && rec.Result != nil {
		if len(rec.Result.Stdout) > 0 {
			req.Stream(1, rec.Result.Stdout)
		}
		if len(rec.Result.Stderr) > 0 {
			req.Stream(2, rec.Result.Stderr)
		}
	}
	return c.result(rec, key)
}

// result turns a final record into a Result or an *Error.
func (c *Client) result(rec *wire.Record, key string) (*box.Result, error) {
	if rec == nil {
		return nil, &Error{Code: "bad_response", Message: "the stream ended without a record", Key: key, inDoubt: true}
	}
	if rec.State != wire.StateCompleted || rec.Result == nil {
		e := &Error{Code: string(wire.CodeInternal), Message: "run ended in state " + rec.State, Key: key}
		if rec.Error != nil {
			e.Code, e.Message = string(rec.Error.Code), rec.Error.Message
		}
		return nil, e
	}
	r := rec.Result
	return &box.Result{
		Stdout: string(r.Stdout), Stderr: string(r.Stderr), StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		ExitStatus: r.ExitStatus, TimedOut: r.TimedOut, KilledForMemory: r.KilledForMemory, Canceled: r.Canceled,
		KilledExternally: r.KilledExternally,
		Duration:         time.Duration(r.DurationMS * float64(time.Millisecond)),
		Posture:          box.Posture{Backend: "remote", Isolation: box.Isolation(r.Isolation), Trust: box.TrustRemote},
		Outputs:          r.Outputs, OutputsTruncated: r.OutputsTruncated, Enforced: r.Enforced,
	}, nil
}

// Output reads one file a finished run left in its outputs directory
// (GET /v1/runs/{key}/outputs/{path}). Errors are *Error (not_found for
// another tenant's key, a key never used, or a file not there).
func (c *Client) Output(ctx context.Context, key, path string) ([]byte, error) {
	return c.get(ctx, wire.PathRuns+"/"+key+"/outputs/"+path)
}

// State returns the executor's record of a run as JSON-friendly fields:
// its state ("queued", "running", "completed", "failed", "lost",
// "expired") and, when it ended without a result, the error code.
func (c *Client) State(ctx context.Context, key string) (state, code string, err error) {
	body, err := c.get(ctx, wire.PathRuns+"/"+key)
	if err != nil {
		return "", "", err
	}
	var rec wire.Record
	if err := json.Unmarshal(body, &rec); err != nil {
		return "", "", &Error{Code: "bad_response", Message: err.Error(), Key: key}
	}
	if rec.Error != nil {
		code = string(rec.Error.Code)
	}
	return rec.State, code, nil
}

func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, &Error{Code: "bad_request", Message: err.Error()}
	}
	hr.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, &Error{Code: "transport", Message: scrub(err), err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, &Error{Code: "transport", Message: scrub(err), err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, refusal(resp.StatusCode, body, "")
	}
	return body, nil
}

// stream POSTs body to path and hands each event of the NDJSON answer to
// on until the final "result" event. It tracks whether the request may
// have reached the executor, to set InDoubt on a transport failure.
func (c *Client) stream(ctx context.Context, path string, body []byte, key string, on func(*wire.Event) error) error {
	var connected, writeFailed atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err != nil {
				writeFailed.Store(true)
			}
		},
	}
	hr, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return &Error{Code: "bad_request", Message: err.Error(), Key: key}
	}
	hr.Header.Set("Authorization", "Bearer "+c.token)
	hr.Header.Set("Content-Type", "application/json")
	transport := func(err error) error {
		// Before a connection nothing was sent; a failed write means
		// the executor never had the whole body, which it needs to
		// start. Anything else may have reached it.
		doubt := connected.Load() && !writeFailed.Load() && !dialFailed(err)
		return &Error{Code: "transport", Message: scrub(err), Key: key, inDoubt: doubt, err: err}
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return transport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), wire.ContentTypeNDJSON) {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return refusal(resp.StatusCode, b, key)
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	for {
		line, err := readEvent(br)
		if errors.Is(err, errEventTooLarge) {
			return &Error{Code: "bad_response", Key: key, inDoubt: true, err: err,
				Message: fmt.Sprintf("an event of the stream is over %d bytes", maxEventBytes)}
		}
		var ev wire.Event
		if err == nil {
			err = json.Unmarshal(line, &ev)
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return transport(fmt.Errorf("the event stream broke before the result: %w", err))
		}
		if ev.Type == wire.EventError && ev.Error != nil {
			return &Error{Code: string(ev.Error.Code), Message: ev.Error.Message, Key: key}
		}
		if err := on(&ev); err != nil {
			return err
		}
		if ev.Type == wire.EventResult {
			return nil
		}
	}
}

// readers keeps the 64 KiB readers of finished streams for the next
// (one made per request was most of a quick eval's allocation).
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// dialFailed reports whether err is a failure to connect. The transport
// retries a request on a fresh connection only when it knows the request
// was not processed on the old one (a pooled connection found dead), so a
// final dial error means nothing was sent, whatever an earlier attempt's
// GotConn said.
func dialFailed(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return (errors.As(err, &op) && op.Op == "dial") || errors.As(err, &dns)
}

// refusal decodes an error response. One not in the executor's shape
// (a proxy's 502 after it forwarded the request) is in doubt.
func refusal(status int, body []byte, key string) error {
	var eb wire.ErrorBody
	if json.Unmarshal(body, &eb) != nil || eb.Error == nil || eb.Error.Code == "" {
		return &Error{Code: "bad_response", Status: status, Key: key, inDoubt: key != "",
			Message: fmt.Sprintf("HTTP %d without an executor error body", status)}
	}
	return &Error{Code: string(eb.Error.Code), Status: status, Message: eb.Error.Message, Key: key}
}

// scrub is a transport error's text; net/http errors quote the URL, which
// holds no secret (the token is a header, credentials are in the body).
func scrub(err error) string { return err.Error() }

// Retry runs req again under the idempotency key of err, the *Error an
// earlier Run of the same request returned: the executor attaches to that
// run or answers its recorded outcome, and never runs it a second time.
// An err without a key (Dial's) is returned as is.
func (c *Client) Retry(ctx context.Context, req remote.Request, err error) (*box.Result, error) {
	var ce *Error
	if !errors.As(err, &ce) || ce.Key == "" {
		return nil, err
	}
	req.IdempotencyKey = ce.Key
	return c.Run(ctx, req)
}

// Cancel cancels the run under key (DELETE /v1/runs/{key}) and returns its
// final state once it has one: a queued run ends "failed" (code canceled)
// without running; a running one is killed and ends "completed" with
// Result.Canceled (exit status 137); a finished run keeps its record.
// Cancelling a Run's context does not do this: the run goes on, so that a
// retry can learn its outcome.
func (c *Client) Cancel(ctx context.Context, key string) (state string, err error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+wire.PathRuns+"/"+key, nil)
	if err != nil {
		return "", &Error{Code: "bad_request", Message: err.Error(), Key: key}
	}
	hr.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return "", &Error{Code: "transport", Message: scrub(err), Key: key, err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if resp.StatusCode != http.StatusOK {
		return "", refusal(resp.StatusCode, body, "")
	}
	var rec wire.Record
	if err := json.Unmarshal(body, &rec); err != nil {
		return "", &Error{Code: "bad_response", Message: err.Error(), Key: key}
	}
	return rec.State, nil
}

// maxEventBytes bounds one event line of a stream, so an executor that
// is broken or hostile (its host is where sandbox escapes land) cannot
// make the application host buffer without end. 256 MiB: the bound this
// client puts on a record read whole, far above the largest result record
// (two outputs of the executor's max_output, default 4 MiB, and its
// outputs files, in base64).
var maxEventBytes = 256 << 20

var errEventTooLarge = errors.New("executor client: event over the size limit")

// readEvent returns the next non-empty line of br without its newline:
// io.EOF at the end, io.ErrUnexpectedEOF for a last line without one,
// errEventTooLarge once a line passes maxEventBytes.
func readEvent(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxEventBytes+1 {
			return nil, errEventTooLarge
		}
		line = append(line, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(bytes.TrimSpace(line)) > 0:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			return t, nil
		}
		line = line[:0]
	}
}
