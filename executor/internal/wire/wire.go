// Package wire is the executor's wire contract (EXECUTOR.md): the JSON
// shapes of requests, events and errors, the error codes with their HTTP
// statuses, the strict request decoder and the idempotency key derivation.
// The server (package executor) and its client (executor/client) both use
// it, so the two sides cannot drift apart.
package wire

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// Version is the path prefix of every API route.
const Version = "/v1"

// Routes.
const (
	PathRuns   = Version + "/runs" // POST: start or attach to a run; GET /v1/runs/{key}: its record
	PathInfo   = Version + "/info" // GET: backend, isolation, tenant
	PathHealth = "/healthz"        // GET: 200 while the process serves
	PathReady  = "/readyz"         // GET: 200 when the store and backend are usable and not draining
	PathMetric = "/metrics"        // GET: Prometheus text format
)

// ContentTypeNDJSON is the media type of an event stream: one JSON object
// per line, flushed as it is written.
const ContentTypeNDJSON = "application/x-ndjson"

// Command, Network and Limits (box.Command's wire form) are
// clientwire's, shared with the embedded child.
type (
	Command = clientwire.Command
	Network = clientwire.Network
	Limits  = clientwire.Limits
)

// FromBox converts a box.Command (its local functions are dropped).
var FromBox = clientwire.FromBox

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	// IdempotencyKey names the logical run within the tenant, chosen
	// by the caller to make a retry: empty means the executor gives the
	// run a fresh random key ([NewKey] "r-"), so a request without one
	// always runs.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// ExpiresAt, when set, is the instant after which the caller no
	// longer wants the run: a request arriving later is refused with
	// CodeExpired, and a queued run not started by then ends in state
	// "expired" without running. Not part of the request hash.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Command   Command    `json:"command"`
	// Credentials are environment values resolved by the client; they
	// go into the command's environment only, and are never logged,
	// stored, hashed or echoed.
	Credentials map[string]string `json:"credentials,omitempty"`
}

// ValidKey checks an idempotency key: 1 to 128 bytes of [A-Za-z0-9._:-].
// (Checked by hand: the regexp's {1,128} compiled at every process start
// cost 0.8 ms and 3,900 allocations of package init.)
func ValidKey(k string) bool {
	if len(k) < 1 || len(k) > 128 {
		return false
	}
	for i := range len(k) {
		if c := k[i]; !isAlnum(c) && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Hash is the request's fingerprint: SHA-256 (hex) of the command's
// canonical JSON (encoding/json, map keys sorted). Credentials, key and
// expiry are not part of it.
func Hash(c *Command) string {
	b, err := json.Marshal(c)
	if err != nil { // cannot happen: the types marshal
		panic(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// DeriveKey is a key made from the command itself: "h-" and the first 32
// hex digits (128 bits) of [Hash]. Nothing uses it unasked: a caller who
// wants identical commands answered from one record passes it on purpose
// (executor/client's Key).
func DeriveKey(c *Command) string { return "h-" + Hash(c)[:32] }

// NewKey is a fresh random idempotency key: prefix and 32 hex digits
// (128 random bits), e.g. "r-…" for a run, "e-…" for an eval. A request
// sent without a key gets one, so it is a run of its own.
func NewKey(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// DecodeRunRequest parses a POST /v1/runs body strictly: one JSON
// object, no unknown fields, no trailing data, a valid key when given,
// and a Command that box.Command.Validate accepts. Errors are *Error
// with CodeBadRequest or CodeInvalidCommand; their messages never quote
// credential values.
func DecodeRunRequest(data []byte) (*RunRequest, error) {
	var r RunRequest
	if err := Strict(data, &r); err != nil {
		return nil, err
	}
	if r.IdempotencyKey != "" && !ValidKey(r.IdempotencyKey) {
		return nil, Errorf(CodeBadRequest, "idempotency_key: want 1 to 128 bytes of A-Z a-z 0-9 . _ : -")
	}
	if r.Command.TimeoutMS < 0 {
		return nil, Errorf(CodeInvalidCommand, "timeout_ms is negative")
	}
	bc := r.Command.Box()
	if len(r.Credentials) > 0 {
		bc.Credentials = map[string]func(context.Context) (string, error){}
		for k, v := range r.Credentials {
			bc.Credentials[k] = func(context.Context) (string, error) { return v, nil } // for Validate's checks of the name
			if strings.IndexByte(v, 0) >= 0 {
				return nil, Errorf(CodeInvalidCommand, "credential %q holds a NUL byte", k)
			}
		}
	}
	if err := bc.Validate(); err != nil {
		return nil, Errorf(CodeInvalidCommand, "%v", err)
	}
	return &r, nil
}

// Strict decodes one JSON value into v: unknown fields and trailing data
// are refused with CodeBadRequest.
func Strict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeBadRequest, "request body: %s", describe(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(CodeBadRequest, "request body: data after the JSON object")
	}
	if !utf8.Valid(data) {
		// encoding/json would run U+FFFD in place of each bad byte: a
		// command other than the one sent.
		return Errorf(CodeBadRequest, "request body: not valid UTF-8")
	}
	// encoding/json lets the last of two equal keys win and matches
	// fields whatever their case: {"command": A, "COMMAND": B} would run
	// B where whatever read the body first (a proxy's audit log, a
	// policy check) saw A. Data that decoded above nests at most 10000
	// deep, which bounds the walk's recursion.
	ks := keyScan{b: data}
	if err := ks.value(false); err != nil {
		return Errorf(CodeBadRequest, "request body: %v", err)
	}
	return nil
}

// mapFields are the request fields that are maps (names chosen by the
// caller, compared exactly: environments are case-sensitive); every
// other object is a struct, whose keys encoding/json matches without
// regard to case.
var mapFields = map[string]bool{"env": true, "files": true, "credentials": true}

// keyScan walks one JSON value that encoding/json has already decoded
// (so it is well formed and valid UTF-8) and refuses an object with a
// key twice: exactly equal in a map, equal under Unicode case folding in
// a struct. Its error names the byte offset, never a key or a value. It
// reads the bytes once, where walking json.Decoder.Token allocated about
// 3 KB per eval request (an error value per scalar) and cost a tenth of
// the request's processor time on loopback (docs/performance.md).
type keyScan struct {
	b []byte
	i int
}

var errKeyScan = errors.New("malformed JSON")

func (s *keyScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value reads one value; isMap says an object there is a map.
func (s *keyScan) value(isMap bool) error {
	s.space()
	if s.i >= len(s.b) {
		return errKeyScan
	}
	switch s.b[s.i] {
	case '{':
		s.i++
		var seen []string        // objects on the wire have a few keys,
		var many map[string]bool // and past 16 a map (an env of 100000 must stay linear)
		for {
			s.space()
			if s.i >= len(s.b) {
				return errKeyScan
			}
			if s.b[s.i] == '}' {
				s.i++
				return nil
			}
			if s.b[s.i] == ',' {
				s.i++
				s.space()
			}
			k, err := s.str()
			if err != nil {
				return err
			}
			f := k
			if !isMap {
				f = fold(k)
			}
			dup := many[f]
			for _, o := range seen {
				dup = dup || o == f
			}
			if dup {
				return fmt.Errorf("a key appears twice in one object (before byte %d)", s.i)
			}
			if many != nil {
				many[f] = true
			} else if seen = append(seen, f); len(seen) > 16 {
				many = make(map[string]bool, 2*len(seen))
				for _, o := range seen {
					many[o] = true
				}
				seen = nil
			}
			s.space()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return errKeyScan
			}
			s.i++
			if err := s.value(!isMap && mapFields[strings.ToLower(k)]); err != nil {
				return err
			}
		}
	case '[':
		s.i++
		for {
			s.space()
			if s.i >= len(s.b) {
				return errKeyScan
			}
			switch s.b[s.i] {
			case ']':
				s.i++
				return nil
			case ',':
				s.i++
			}
			if err := s.value(false); err != nil {
				return err
			}
		}
	case '"':
		_, err := s.str()
		return err
	}
	for s.i < len(s.b) { // a number, true, false or null
		switch s.b[s.i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return nil
		}
		s.i++
	}
	return nil
}

// str reads one string and returns it unescaped as encoding/json does.
func (s *keyScan) str() (string, error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", errKeyScan
	}
	start, escaped := s.i, false
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i++
		case '"':
			s.i++
			raw := s.b[start:s.i]
			if !escaped {
				return string(raw[1 : len(raw)-1]), nil
			}
			var out string
			if err := json.Unmarshal(raw, &out); err != nil {
				return "", errKeyScan
			}
			return out, nil
		}
	}
	return "", errKeyScan
}

// fold maps s to one representative of its case-folding class (each rune
// to the smallest rune of its unicode.SimpleFold orbit), so two keys
// encoding/json would match to the same field fold to the same string.
// (For ASCII that is the upper case letter: 'A' < 'a', and the orbits of
// k and s hold K and S with the Kelvin and long s signs above them.)
func fold(s string) string {
	ascii, lower := true, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		ascii = ascii && c < utf8.RuneSelf
		lower = lower || 'a' <= c && c <= 'z'
	}
	if ascii {
		if !lower {
			return s
		}
		return strings.ToUpper(s)
	}
	var b strings.Builder
	for _, r := range s {
		f := r
		for x := unicode.SimpleFold(r); x != r; x = unicode.SimpleFold(x) {
			f = min(f, x)
		}
		b.WriteRune(f)
	}
	return b.String()
}

// describe says what is wrong with a body without quoting any of it (a
// value could be a credential): the offset of a syntax error, the field
// of a type error, the name of an unknown field.
func describe(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: want a JSON %s, not %s", te.Field, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the JSON ends early"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return err.Error()[len("json: "):]
	}
	return "a value has the wrong form (expires_at: RFC 3339; bytes: base64)"
}
