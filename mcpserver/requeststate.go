package mcpserver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
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
	// directory stays small. Every record is removed once its TTL has
	// passed since it was written.
	DefaultStateTTL = time.Hour
	// DefaultMaxInlineState is the largest sealed state carried inside a
	// request state itself (32 KiB, about 43 KiB once encoded); a larger
	// one is written to the state directory and the request state holds
	// a sealed reference to it. A paused call's state is its program and
	// the host's answers so far (a few KiB); an idle session's holds the
	// VM's changed memory (hundreds of KiB).
	DefaultMaxInlineState = 32 << 10
	// DefaultMaxStates bounds the records the state directory holds at
	// once: stored states, recorded outcomes, and the claims and notes
	// that go with them (those two are empty files). An outcome is a
	// result, at most about codemode's 32 KiB output limit; a stored
	// state is a large paused call's or a session handle's, typically
	// tens to hundreds of KiB: 10,000 records are a few hundred MiB in a
	// busy hour (DefaultMaxStateBytes bounds their bytes).
	DefaultMaxStates = 10000
	// DefaultMaxStateBytes bounds the bytes those records take together
	// (4 GiB). A session handle's state holds the VM's changed memory, up
	// to the memory limit (512 MiB by default), so the record count alone
	// would let a client that fills its session's memory write terabytes.
	DefaultMaxStateBytes = 4 << 30
	// DefaultClientStateShare is the part of the state directory one
	// client may hold: an eighth of the records and bytes (512 MiB of the
	// default 4 GiB), so that no fewer than eight clients fill it. A
	// client is the authenticated user when the request has one, else
	// the HTTP client's address (its /64 for IPv6), else (stdio) the
	// server process.
	DefaultClientStateShare = 8
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
	// Owner is the tag (ownerTag) of the client whose share of the state
	// directory the state's records count against; it is part of their
	// file names.
	Owner string `json:"o,omitempty"`
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

// ownerHeader is the request header through which [Server.HTTPHandler]
// hands a call the address of its client (see extraOwner); a client's
// own header of that name is removed.
const ownerHeader = "Glovebox-Internal-Client"

// clientAddr is what identifies the client at the HTTP remote address
// remote: its IP address, or for IPv6 its /64 (one host's addresses);
// "" when remote cannot be read.
func clientAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return ""
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// extraOwner is the client whose share of the state directory a
// request's records count against (see DefaultClientStateShare):
// "user:ID" for an authenticated user, "addr:ADDRESS" for an HTTP request
// without one (the address HTTPHandler put in ownerHeader), "" otherwise
// (stdio: the book's own process).
func extraOwner(x *mcp.RequestExtra) string {
	if u := extraUser(x); u != "" {
		return "user:" + u
	}
	if x != nil && x.Header != nil {
		if a := x.Header.Get(ownerHeader); a != "" {
			return "addr:" + a
		}
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

// ownerTag is what an envelope and its records' file names carry of
// owner ("" is the book's own process): 16 hex digits of a MAC under the
// book's key, so that neither shows a user id or an address.
func (b *stateBook) ownerTag(owner string) string {
	if owner == "" {
		owner = b.self
	}
	m := hmac.New(sha256.New, b.key)
	m.Write([]byte("owner\x00" + owner))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// stateBook seals and opens request states, and keeps what must outlive
// a request: large states and the outcome of each continued state, so a
// replayed request state gets the outcome instead of running again.
//
// Its records live in four sub-directories of dir (or in memory):
// states, outcomes, claims (a state being or having been continued) and
// dropped (a note that a record was dropped early, so that its request
// state is refused saying so). A record's file is named OWNER.K.ID:
// the owner's tag, "s" for a session handle or "c" for a paused call,
// and the state's id. States and outcomes count against the bounds:
// max records and maxBytes in all, maxClient and maxClientBytes for one
// owner. Every record is removed once it is older than the TTL (and a
// second, the resolution of an envelope's time), when the book is next
// listed: at a write that finds no room, at most once a second at any
// write, and at most once a minute at an open.
type stateBook struct {
	key            []byte
	ttl            time.Duration
	maxInline      int
	max            int
	maxBytes       int64
	maxClient      int
	maxClientBytes int64
	dir            string // "" keeps everything in memory (one process)
	self           string // the owner of requests without one: this process

	mu     sync.Mutex
	mem    map[string]memRecord // records when dir is "", by "SUB/NAME"
	listed time.Time            // when use was counted
	use    usage
}

type memRecord struct {
	b    []byte
	made time.Time
}

// usage is what the counted records (states and outcomes) take, in all
// and by owner tag.
type usage struct {
	count  int
	bytes  int64
	owners map[string]*ownerUse
}

type ownerUse struct {
	count int
	bytes int64
}

// add counts n records of size bytes in all for owner (negative to take
// them off).
func (u *usage) add(owner string, n int, size int64) {
	if u.owners == nil {
		u.owners = map[string]*ownerUse{}
	}
	o := u.owners[owner]
	if o == nil {
		o = &ownerUse{}
		u.owners[owner] = o
	}
	u.count, u.bytes, o.count, o.bytes = u.count+n, u.bytes+size, o.count+n, o.bytes+size
}

func (u *usage) of(owner string) ownerUse {
	if o := u.owners[owner]; o != nil {
		return *o
	}
	return ownerUse{}
}

// record is one record as listed.
type record struct {
	sub, name, owner string
	kind             byte // 's' a session handle's, 'c' a paused call's, 0 unknown (a name without an owner)
	size             int64
	made             time.Time
}

// counted reports whether r counts against the bounds.
func (r record) counted() bool { return r.sub == "states" || r.sub == "outcomes" }

// droppable reports whether r may be dropped to make room: a session
// handle's stored state, or an outcome (only a replay would read it).
// A paused call's state waits for a person's answer, and a claim keeps a
// state from running twice: those stay until they expire.
func (r record) droppable() bool {
	return r.sub == "outcomes" || r.sub == "states" && r.kind == 's'
}

var stateSubs = []string{"states", "claims", "outcomes", "dropped"}

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
	b := &stateBook{key: m.Sum(nil), ttl: cmp.Or(o.StateTTL, DefaultStateTTL), maxInline: cmp.Or(o.MaxInlineState, DefaultMaxInlineState),
		max: DefaultMaxStates, maxBytes: cmp.Or(o.MaxStateBytes, DefaultMaxStateBytes), dir: o.StateDir,
		self: "process:" + rand.Text(), mem: map[string]memRecord{}}
	b.maxClient = b.max / DefaultClientStateShare
	b.maxClientBytes = cmp.Or(o.MaxClientStateBytes, b.maxBytes/DefaultClientStateShare)
	if b.maxClientBytes > b.maxBytes {
		return nil, fmt.Errorf("mcpserver: Options.MaxClientStateBytes (%d) is more than MaxStateBytes (%d)", b.maxClientBytes, b.maxBytes)
	}
	if b.dir != "" {
		for _, sub := range stateSubs {
			if err := os.MkdirAll(filepath.Join(b.dir, sub), 0o700); err != nil {
				return nil, fmt.Errorf("mcpserver: state directory: %w", err)
			}
		}
	}
	return b, nil
}

// fileName is the name of e's records (see stateBook); an envelope made
// before owners has none, and its records are named by its id alone.
func fileName(e *envelope) string {
	if e.Owner == "" {
		return e.ID
	}
	k := "c"
	if e.Kind == "session" {
		k = "s"
	}
	return e.Owner + "." + k + "." + e.ID
}

// parseName reads a record's file name: its owner tag and kind, and
// whether it is one of the book's names at all.
func parseName(name string) (owner string, kind byte, ok bool) {
	parts := strings.Split(name, ".")
	switch {
	case len(parts) == 1:
		return "", 0, validID(name)
	case len(parts) == 3 && validID(parts[0]) && (parts[1] == "s" || parts[1] == "c") && validID(parts[2]):
		return parts[0], parts[1][0], true
	}
	return "", 0, false
}

// seal makes the request state of e with the sealed state st for user
// (the authenticated user of the request, "" without one) and owner (the
// client, see extraOwner), storing st in the state directory when it is
// larger than maxInline or e is a session handle (which a model passes
// on: it stays short). It fails when st does not fit (see reserve).
func (b *stateBook) seal(e envelope, st []byte, user, owner string) (string, error) {
	id, err := glovebox.StateID(st)
	if err != nil {
		return "", err
	}
	e.V, e.ID, e.Made, e.User, e.Owner = 1, id, time.Now().Unix(), b.userTag(user), b.ownerTag(owner)
	if len(st) <= b.maxInline && e.Kind != "session" {
		e.State = st
	} else if err := b.write("states", &e, st); err != nil {
		return "", err
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
// (the authenticated user of the request, "" without one), expired,
// dropped early to make room, or whose stored state is gone. The user is
// checked before anything is read or claimed, so that another user's try
// leaves the state usable.
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
	b.sweep()
	if b.has("dropped", &e) {
		return nil, nil, b.dropped(kind)
	}
	if e.State == nil && !b.has("states", &e) {
		if _, ok := b.outcome(&e); ok {
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

// dropped is the error of a request state whose stored state or outcome
// was dropped to make room (see reserve).
func (b *stateBook) dropped(kind string) error {
	what := map[string]string{"call": "requestState", "session": "session handle"}[kind]
	return &errState{fmt.Sprintf("invalid params: the %s expired early: the state directory needed room (for this client's share, %d records and %s, or for all, %d records and %s), and the records nobody had come back for the longest, this one among them, were dropped; start the call again without it", what, b.maxClient, sizeText(b.maxClientBytes), b.max, sizeText(b.maxBytes))}
}

// load returns e's sealed state: the one it holds, or the stored one,
// read once the caller has claimed e. A stored state that is gone gives
// the claim back and fails with an *errState.
func (b *stateBook) load(e *envelope) ([]byte, error) {
	if e.State != nil {
		return e.State, nil
	}
	st, err := b.read("states", e)
	if err != nil {
		b.unclaim(e)
		if b.has("dropped", e) {
			return nil, b.dropped(e.Kind)
		}
		return nil, b.gone(e.Kind)
	}
	return st, nil
}

// busy is the error of a state claimed by another request (being
// continued, or continued with its outcome dropped early), where what
// says what is going on in the first case.
func (b *stateBook) busy(e *envelope, what string) error {
	if b.has("dropped", e) {
		return b.dropped(e.Kind)
	}
	return &errState{what}
}

// has reports whether sub holds a record of e, without reading it.
func (b *stateBook) has(sub string, e *envelope) bool {
	name := fileName(e)
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, ok := b.mem[sub+"/"+name]
		return ok
	}
	if _, _, ok := parseName(name); !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(b.dir, sub, name))
	return err == nil
}

// unclaim gives back a claim taken on a state that then could not be read.
func (b *stateBook) unclaim(e *envelope) {
	name := fileName(e)
	if b.dir == "" {
		b.mu.Lock()
		delete(b.mem, "claims/"+name)
		b.mu.Unlock()
	} else if _, _, ok := parseName(name); ok {
		os.Remove(filepath.Join(b.dir, "claims", name))
	}
}

// claim records e as being continued; false means it was before.
func (b *stateBook) claim(e *envelope) (bool, error) {
	name := fileName(e)
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.mem["claims/"+name]; ok {
			return false, nil
		}
		b.mem["claims/"+name] = memRecord{made: time.Now()}
		return true, nil
	}
	if _, _, ok := parseName(name); !ok {
		return false, errors.New("state directory: a state id that names no record")
	}
	f, err := os.OpenFile(filepath.Join(b.dir, "claims", name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state directory: %w", err)
	}
	return true, f.Close()
}

// record keeps the outcome of continuing e, for a replay, and deletes
// e's stored state: a state whose outcome is recorded never runs again,
// and a session handle's is as large as the VM's changed memory.
func (b *stateBook) record(e *envelope, outcome []byte) error {
	r := record{sub: "outcomes", name: fileName(e), owner: e.Owner}
	b.remove(record{sub: "states", name: r.name, owner: e.Owner})
	if err := b.write("outcomes", e, outcome); err != nil {
		b.mu.Lock()
		b.note(r) // a replay is refused as expired early, not as unknown
		b.mu.Unlock()
		return err
	}
	return nil
}

// outcome returns the outcome recorded for e.
func (b *stateBook) outcome(e *envelope) ([]byte, bool) {
	o, err := b.read("outcomes", e)
	return o, err == nil
}

// write stores p as e's record in sub, once reserve has made room.
func (b *stateBook) write(sub string, e *envelope, p []byte) error {
	name := fileName(e)
	if _, _, ok := parseName(name); !ok {
		return errors.New("state directory: a state id that names no record")
	}
	if err := b.reserve(e.Owner, int64(len(p))); err != nil {
		return err
	}
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.mem[sub+"/"+name] = memRecord{b: bytes.Clone(p), made: time.Now()}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Join(b.dir, sub), ".tmp-")
	if err == nil {
		_, err = tmp.Write(p)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), filepath.Join(b.dir, sub, name))
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		b.mu.Lock()
		b.use.add(e.Owner, -1, -int64(len(p)))
		b.mu.Unlock()
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}

func (b *stateBook) read(sub string, e *envelope) ([]byte, error) {
	name := fileName(e)
	if b.dir == "" {
		b.mu.Lock()
		defer b.mu.Unlock()
		r, ok := b.mem[sub+"/"+name]
		if !ok {
			return nil, os.ErrNotExist
		}
		return r.b, nil
	}
	if _, _, ok := parseName(name); !ok {
		return nil, os.ErrNotExist
	}
	return os.ReadFile(filepath.Join(b.dir, sub, name))
}

// remove deletes the record r (its sub, name and owner), taking it off
// the count.
func (b *stateBook) remove(r record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removeLocked(r)
}

// removeLocked is remove with b.mu held.
func (b *stateBook) removeLocked(r record) {
	var size int64 = -1
	if b.dir == "" {
		if m, ok := b.mem[r.sub+"/"+r.name]; ok {
			size = int64(len(m.b))
			delete(b.mem, r.sub+"/"+r.name)
		}
	} else if _, _, ok := parseName(r.name); ok {
		path := filepath.Join(b.dir, r.sub, r.name)
		if info, err := os.Stat(path); err == nil && os.Remove(path) == nil {
			size = info.Size()
		}
	}
	if size >= 0 && r.counted() {
		b.use.add(r.owner, -1, -size)
	}
}

// validID reports whether id is a glovebox state id or an owner tag (hex
// digits only), so it names no path but its own.
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

// keep is how long a record is kept after it was written: the TTL, and
// a second for the resolution of an envelope's time (a record goes only
// once every request state that can reach it has expired).
func (b *stateBook) keep() time.Duration { return b.ttl + time.Second }

// sweep lists the book, removing the expired records, when it was last
// listed a minute ago or more.
func (b *stateBook) sweep() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.listed) >= time.Minute {
		b.list(time.Now())
	}
}

// list removes the records older than keep, recounts the others and
// returns them, oldest first; b.mu is held. A directory of 10,000
// records lists in milliseconds.
func (b *stateBook) list(now time.Time) []record {
	var recs []record
	b.use = usage{}
	cut := now.Add(-b.keep())
	note := func(sub, name string, size int64, made time.Time) bool {
		owner, kind, ok := parseName(name)
		if !ok || !made.After(cut) {
			return false
		}
		r := record{sub: sub, name: name, owner: owner, kind: kind, size: size, made: made}
		if r.counted() {
			b.use.add(owner, 1, size)
		}
		recs = append(recs, r)
		return true
	}
	if b.dir == "" {
		for k, m := range b.mem {
			sub, name, _ := strings.Cut(k, "/")
			if !note(sub, name, int64(len(m.b)), m.made) {
				delete(b.mem, k)
			}
		}
	} else {
		for _, sub := range stateSubs {
			ents, _ := os.ReadDir(filepath.Join(b.dir, sub))
			for _, e := range ents {
				info, err := e.Info()
				if err != nil {
					continue
				}
				if strings.HasPrefix(e.Name(), ".tmp-") { // a write under way, or one a crash left
					if !info.ModTime().After(cut) {
						os.Remove(filepath.Join(b.dir, sub, e.Name()))
					}
					continue
				}
				if !note(sub, e.Name(), info.Size(), info.ModTime()) {
					os.Remove(filepath.Join(b.dir, sub, e.Name()))
				}
			}
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].made.Before(recs[j].made) })
	b.listed = now
	return recs
}

// fits reports whether one more record of size bytes of owner stays
// within the bounds, as last counted; b.mu is held.
func (b *stateBook) fits(owner string, size int64) bool {
	return b.ownerFits(owner, size) && b.use.count+1 <= b.max && b.use.bytes+size <= b.maxBytes
}

func (b *stateBook) ownerFits(owner string, size int64) bool {
	o := b.use.of(owner)
	return o.count+1 <= b.maxClient && o.bytes+size <= b.maxClientBytes
}

// reserve makes room for one record of size bytes of owner and counts
// it, or fails saying whose bound it would pass and when the oldest
// record in the way expires. The count is taken again at most once a
// second, and always before a refusal (removing the records that have
// expired). Room is made by dropping the droppable records (see
// record.droppable) that nobody has come back for the longest: first the
// owner's own while it is over its share, then anyone's while the
// whole is over its bounds; each gets a note in dropped, so that its
// request state is refused as expired early.
func (b *stateBook) reserve(owner string, size int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if size > b.maxClientBytes {
		return fmt.Errorf("the state (%s) is larger than one client's share of the state directory (%s); raise --max-client-state-bytes, or keep less in the session", sizeText(size), sizeText(b.maxClientBytes))
	}
	now := time.Now()
	if now.Sub(b.listed) < time.Second && b.fits(owner, size) {
		b.use.add(owner, 1, size)
		return nil
	}
	recs := b.list(now)
	for _, pass := range []func(record) bool{
		func(r record) bool { return r.owner == owner && !b.ownerFits(owner, size) },
		func(r record) bool { return b.ownerFits(owner, size) && !b.fits(owner, size) },
	} {
		for i, r := range recs {
			if r.name == "" || !r.droppable() || !pass(r) {
				continue
			}
			b.removeLocked(r)
			b.note(r)
			recs[i].name = ""
		}
	}
	if b.fits(owner, size) {
		b.use.add(owner, 1, size)
		return nil
	}
	var oldest time.Time
	for _, r := range recs {
		if r.name != "" && r.counted() && (b.ownerFits(owner, size) || r.owner == owner) {
			oldest = r.made
			break
		}
	}
	when := "try again later"
	if !oldest.IsZero() {
		at := oldest.Add(b.keep())
		left := max(at.Sub(now).Truncate(time.Second)+time.Second, time.Second)
		when = fmt.Sprintf("the oldest record in the way expires in %v (at %s): try again then", left, at.UTC().Format("15:04:05 UTC"))
	}
	if !b.ownerFits(owner, size) {
		o := b.use.of(owner)
		return fmt.Errorf("this client holds %d records and %s of the state directory, its share (%d records, %s: --max-client-state-bytes), in paused calls waiting for answers; %s, or answer those calls", o.count, sizeText(o.bytes), b.maxClient, sizeText(b.maxClientBytes), when)
	}
	return fmt.Errorf("the state directory holds %d records and %s, its limit (%d records, %s: --max-state-bytes), in paused calls waiting for answers; %s", b.use.count, sizeText(b.use.bytes), b.max, sizeText(b.maxBytes), when)
}

// note records that r was dropped to make room; b.mu is held. A note is
// an empty file, kept as long as any record.
func (b *stateBook) note(r record) {
	if _, _, ok := parseName(r.name); !ok {
		return
	}
	if b.dir == "" {
		b.mem["dropped/"+r.name] = memRecord{made: time.Now()}
		return
	}
	if f, err := os.OpenFile(filepath.Join(b.dir, "dropped", r.name), os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		f.Close()
	}
}

// sizeText writes n bytes in MiB when it is at least one, else in bytes.
func sizeText(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
