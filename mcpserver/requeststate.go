package mcpserver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
)

// Defaults for the request-state [Options] fields.
const (
	// DefaultStateTTL is how long a request state (an input_required
	// result's requestState, a ruby_session handle) can be used, and so
	// how long its recorded outcome is kept for a replay: an hour, time
	// for a person to answer a question, short enough that the state
	// directory stays small.
	DefaultStateTTL = time.Hour
	// DefaultMaxInlineState is the largest sealed state carried inside a
	// request state itself (32 KiB, about 43 KiB once encoded); a larger
	// one is written to the state directory and the request state holds
	// a sealed reference to it. A paused call's state is its program and
	// the host's answers so far (a few KiB); an idle session's holds the
	// VM's changed memory (hundreds of KiB).
	DefaultMaxInlineState = 32 << 10
	// DefaultMaxStates bounds the records (recorded outcomes and stored
	// states) the state directory holds at once. An outcome is a result,
	// at most about codemode's 32 KiB output limit; a stored state is a
	// large paused call's or a session handle's, typically tens to
	// hundreds of KiB: 10,000 records are a few hundred MiB in a busy
	// hour (DefaultMaxStateBytes bounds their bytes). Past it a call that would pause,
	// and a ruby_session call under 2026-07-28, gets an error saying so
	// until older records expire.
	DefaultMaxStates = 10000
	// DefaultMaxStateBytes bounds the bytes those records take together
	// (4 GiB). A session handle's state holds the VM's changed memory, up
	// to the memory limit (512 MiB by default), so the record count alone
	// would let a client that fills its session's memory write terabytes.
	// Past it a call that would pause, and a ruby_session call under
	// 2026-07-28, gets an error saying so until older records expire (a
	// state is deleted once its outcome is recorded).
	DefaultMaxStateBytes = 4 << 30
)

// errState is the error a request state that cannot be used gets; its
// message says why and what to do. It is sent as a JSON-RPC -32602.
type errState struct{ msg string }

func (e *errState) Error() string { return e.msg }

// envelope is what a request state says, signed with the server's key.
type envelope struct {
	V    int    `json:"v"`
	Kind string `json:"k"`    // "call": a paused call; "session": a ruby_session handle
	Tool string `json:"tool"` // the tool or prompt it belongs to
	Made int64  `json:"t"`    // when it was made, Unix seconds
	ID   string `json:"id"`   // the glovebox state's id
	// State is the sealed glovebox state, or nil when it is in the state
	// directory under ID.
	State []byte `json:"s,omitempty"`
	// Asks are the input requests of the result that carried it, to ask
	// again when a retry lacks an answer; Approval says Asks is the
	// approval question.
	Asks     json.RawMessage `json:"asks,omitempty"`
	Approval bool            `json:"approval,omitempty"`
	// Forward is set when Asks is a bound MCP server's question
	// (ForwardElicit).
	Forward *forwardState `json:"fwd,omitempty"`
	// User is the tag (userTag) of the authenticated user the state was
	// given to, "" for a request without one (then the state is a bearer
	// capability: whoever holds it can use it).
	User string `json:"u,omitempty"`
}

// requestUser is the authenticated user of req: the UserID of the
// go-sdk TokenInfo an embedder's auth middleware (auth.RequireBearerToken)
// put on the HTTP request, "" without one (stdio, or a shared --token).
func requestUser(req mcp.Request) string {
	if req == nil {
		return ""
	}
	return extraUser(req.GetExtra())
}

func extraUser(x *mcp.RequestExtra) string {
	if x == nil || x.TokenInfo == nil {
		return ""
	}
	return x.TokenInfo.UserID
}

// contextUser is the authenticated user of an HTTP request's context.
func contextUser(ctx context.Context) string {
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		return ti.UserID
	}
	return ""
}

// userTag is what an envelope records of user: a MAC under the book's
// key, so that the state a client sees does not carry the user id.
func (b *stateBook) userTag(user string) string {
	if user == "" {
		return ""
	}
	m := hmac.New(sha256.New, b.key)
	m.Write([]byte("user\x00" + user))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// stateBook seals and opens request states, and keeps what must outlive
// a request: large states and the outcome of each continued state, so a
// replayed request state gets the outcome instead of running again.
type stateBook struct {
	key       []byte
	ttl       time.Duration
	maxInline int
	max       int
	maxBytes  int64
	dir       string // "" keeps everything in memory (one process)

	mu      sync.Mutex
	mem     map[string]memRecord // records when dir is ""
	swept   time.Time
	counted time.Time // when count was taken
	count   int       // the records in dir then
	bytes   int64     // their bytes
}

type memRecord struct {
	b    []byte
	made time.Time
}

const stateFormat = "gb1"

// newStateBook makes the book of o; a nil key makes a random one (states
// then open only in this process).
func newStateBook(o Options) (*stateBook, error) {
	key := o.StateKey
	if key == nil {
		key = make([]byte, 32)
		rand.Read(key)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("mcpserver: Options.StateKey has %d bytes; it needs at least 32", len(key))
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("glovebox mcp request state v1"))
	b := &stateBook{key: m.Sum(nil), ttl: o.StateTTL, maxInline: o.MaxInlineState, max: DefaultMaxStates, maxBytes: DefaultMaxStateBytes, dir: o.StateDir, mem: map[string]memRecord{}}
	if b.ttl == 0 {
		b.ttl = DefaultStateTTL
	}
	if b.maxInline == 0 {
		b.maxInline = DefaultMaxInlineState
	}
	if b.dir != "" {
		for _, sub := range []string{"states", "claims", "outcomes"} {
			if err := os.MkdirAll(filepath.Join(b.dir, sub), 0o700); err != nil {
				return nil, fmt.Errorf("mcpserver: state directory: %w", err)
			}
		}
	}
	return b, nil
}

// seal makes the request state of e with the sealed state st for user
// (the authenticated user of the request, "" without one), storing st
// in the state directory when it is larger than maxInline or e is a
// session handle (which a model passes on: it stays short).
func (b *stateBook) seal(e envelope, st []byte, user string) (string, error) {
	id, err := glovebox.StateID(st)
	if err != nil {
		return "", err
	}
	e.V, e.ID, e.Made, e.User = 1, id, time.Now().Unix(), b.userTag(user)
	if b.full() {
		return "", fmt.Errorf("the state directory holds %d records or %d MiB, its limit; try again when older ones have expired (after %v)", b.max, b.maxBytes>>20, b.ttl)
	}
	if len(st) <= b.maxInline && e.Kind != "session" {
		e.State = st
	} else {
		if err := b.write("states", id, st); err != nil {
			return "", err
		}
	}
	body, err := json.Marshal(e)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, b.key)
	m.Write(body)
	enc := base64.RawURLEncoding
	return stateFormat + "." + enc.EncodeToString(body) + "." + enc.EncodeToString(m.Sum(nil)), nil
}

// open checks a request state and returns what it says and its sealed
// state when the request state holds it; a state stored in the directory
// is only looked for (nil: read it with load once the state is claimed,
// so that requests refused as replays or as in use read nothing). It
// fails with an *errState: not one of this server's (altered, or made
// with another key), of another tool, given to another user than user
// (the authenticated user of the request, "" without one), expired, or
// whose stored state is gone. The user is checked before anything is
// read or claimed, so that another user's try leaves the state usable.
func (b *stateBook) open(s, kind, tool, user string) (*envelope, []byte, error) {
	what := map[string]string{"call": "requestState", "session": "session handle"}[kind]
	parts := strings.Split(s, ".")
	enc := base64.RawURLEncoding
	var body, mac []byte
	var err error
	if len(parts) == 3 && parts[0] == stateFormat {
		if body, err = enc.DecodeString(parts[1]); err == nil {
			mac, err = enc.DecodeString(parts[2])
		}
	}
	m := hmac.New(sha256.New, b.key)
	m.Write(body)
	if len(parts) != 3 || parts[0] != stateFormat || err != nil || !hmac.Equal(mac, m.Sum(nil)) {
		return nil, nil, &errState{fmt.Sprintf("invalid params: the %s is not one this server made: it was altered, or sealed with another key (servers that share requests need the same --state-key); start the call again without it", what)}
	}
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil || e.V != 1 {
		return nil, nil, &errState{fmt.Sprintf("invalid params: the %s has a format this server does not read; start the call again without it", what)}
	}
	if e.Kind != kind || e.Tool != tool {
		return nil, nil, &errState{fmt.Sprintf("invalid params: the %s belongs to %s, not to %s; send it back with the request that received it", what, e.Tool, tool)}
	}
	if !hmac.Equal([]byte(e.User), []byte(b.userTag(user))) {
		return nil, nil, &errState{fmt.Sprintf("invalid params: the %s was given to another user of this server (or to a request without a user, or this one has none); only the user it was given to can send it back; start the call again without it", what)}
	}
	if age := time.Since(time.Unix(e.Made, 0)); age > b.ttl {
		return nil, nil, &errState{fmt.Sprintf("invalid params: the %s expired: it was made %v ago, and this server keeps states and their outcomes for %v; start the call again without it", what, age.Round(time.Second), b.ttl)}
	}
	if e.State == nil && !b.has("states", e.ID) {
		if _, ok := b.outcome(e.ID); ok {
			return &e, nil, nil // continued: its state is gone, its outcome answers
		}
		return nil, nil, b.gone(kind)
	}
	return &e, e.State, nil
}

// gone is the error of a request state whose stored state is missing.
func (b *stateBook) gone(kind string) error {
	what := map[string]string{"call": "requestState", "session": "session handle"}[kind]
	return &errState{fmt.Sprintf("invalid params: the state the %s refers to is not in the state directory (servers that share requests need the same --state-dir); start the call again without it", what)}
}

// load returns e's sealed state: the one it holds, or the stored one,
// read once the caller has claimed e.ID. A stored state that is gone
// gives the claim back and fails with an *errState.
func (b *stateBook) load(e *envelope) ([]byte, error) {
	if e.State != nil {
		return e.State, nil
	}
	st, err := b.read("states", e.ID)
	if err != nil {
		b.unclaim(e.ID)
		return nil, b.gone(e.Kind)
	}
	return st, nil
}

// has reports whether sub holds a record for id, without reading it.
func (b *stateBook) has(sub, id string) bool {
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, ok := b.mem[sub+"/"+id]
		return ok
	}
	if !validID(id) {
		return false
	}
	_, err := os.Stat(filepath.Join(b.dir, sub, id))
	return err == nil
}

// unclaim gives back a claim taken on a state that then could not be read.
func (b *stateBook) unclaim(id string) {
	if b.dir == "" {
		b.mu.Lock()
		delete(b.mem, "claims/"+id)
		b.mu.Unlock()
	} else if validID(id) {
		os.Remove(filepath.Join(b.dir, "claims", id))
	}
}

// claim records id as being continued; false means it was before.
func (b *stateBook) claim(id string) (bool, error) {
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.mem["claims/"+id]; ok {
			return false, nil
		}
		b.mem["claims/"+id] = memRecord{made: time.Now()}
		return true, nil
	}
	f, err := os.OpenFile(filepath.Join(b.dir, "claims", id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state directory: %w", err)
	}
	return true, f.Close()
}

// record keeps the outcome of continuing id, for a replay, and deletes
// id's stored state: a state whose outcome is recorded never runs again,
// and a session handle's is as large as the VM's changed memory.
func (b *stateBook) record(id string, outcome []byte) error {
	if err := b.write("outcomes", id, outcome); err != nil {
		return err
	}
	if b.dir == "" {
		b.mu.Lock()
		delete(b.mem, "states/"+id)
		b.mu.Unlock()
	} else if validID(id) {
		os.Remove(filepath.Join(b.dir, "states", id))
	}
	return nil
}

// outcome returns the outcome recorded for id.
func (b *stateBook) outcome(id string) ([]byte, bool) {
	o, err := b.read("outcomes", id)
	return o, err == nil
}

func (b *stateBook) write(sub, id string, p []byte) error {
	b.sweep()
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.mem[sub+"/"+id] = memRecord{b: bytes.Clone(p), made: time.Now()}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Join(b.dir, sub), ".tmp-")
	if err == nil {
		_, err = tmp.Write(p)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), filepath.Join(b.dir, sub, id))
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}

func (b *stateBook) read(sub, id string) ([]byte, error) {
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		r, ok := b.mem[sub+"/"+id]
		if !ok {
			return nil, os.ErrNotExist
		}
		return r.b, nil
	}
	if !validID(id) {
		return nil, os.ErrNotExist
	}
	return os.ReadFile(filepath.Join(b.dir, sub, id))
}

// validID reports whether id is a glovebox state id (hex digits only), so
// it names no path but its own.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// full reports whether the records number max or more, or take maxBytes
// or more. The directory is counted at most once a second (a count of
// 10,000 files takes milliseconds), so the bounds may be passed by the
// states sealed in that second.
func (b *stateBook) full() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir == "" {
		var n int64
		for _, r := range b.mem {
			n += int64(len(r.b))
		}
		return len(b.mem) >= b.max || n >= b.maxBytes
	}
	if time.Since(b.counted) >= time.Second {
		b.count, b.bytes = 0, 0
		for _, sub := range []string{"states", "outcomes"} {
			ents, _ := os.ReadDir(filepath.Join(b.dir, sub))
			b.count += len(ents)
			for _, e := range ents {
				if info, err := e.Info(); err == nil {
					b.bytes += info.Size()
				}
			}
		}
		b.counted = time.Now()
	}
	return b.count >= b.max || b.bytes >= b.maxBytes
}

// sweep removes, at most once a minute, the records older than twice the
// TTL: the request states they serve have expired (a claim is kept as long,
// so an expired state is refused as expired, never run again).
func (b *stateBook) sweep() {
	b.mu.Lock()
	if time.Since(b.swept) < time.Minute {
		b.mu.Unlock()
		return
	}
	b.swept = time.Now()
	cut := time.Now().Add(-2 * b.ttl)
	if b.dir == "" {
		for k, r := range b.mem {
			if r.made.Before(cut) {
				delete(b.mem, k)
			}
		}
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	for _, sub := range []string{"states", "claims", "outcomes"} {
		ents, _ := os.ReadDir(filepath.Join(b.dir, sub))
		for _, e := range ents {
			if info, err := e.Info(); err == nil && info.ModTime().Before(cut) {
				os.Remove(filepath.Join(b.dir, sub, e.Name()))
			}
		}
	}
}
