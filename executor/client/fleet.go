package client

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// Fleet spreads requests over several executors, each with its own
// idempotency store, by routing every request to the executor that
// rendezvous hashing of its idempotency key picks: the same key always
// reaches the same executor (so a retry finds its record, and two clients
// sending one key meet in one store), and adding an executor moves only
// about 1/N of the keys. deploy/kubernetes runs such a fleet as a
// StatefulSet whose pods keep their names; give NewFleet one Client per
// pod name, in any order. It is safe for concurrent use.
type Fleet struct {
	members []*Client
}

var _ remote.Executor = (*Fleet)(nil)

// NewFleet makes a Fleet of members (at least one; their URLs must
// differ, since a member's URL is its place in the hash).
func NewFleet(members ...*Client) (*Fleet, error) {
	if len(members) == 0 {
		return nil, errors.New("client: a fleet needs at least one executor")
	}
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m.base] {
			return nil, errors.New("client: " + m.base + " is in the fleet twice")
		}
		seen[m.base] = true
	}
	return &Fleet{members: members}, nil
}

// Pick returns the member that serves key: the one whose URL hashed with
// key (the first 64 bits of SHA-256) is highest.
func (f *Fleet) Pick(key string) *Client { return f.members[f.index(key)] }

func (f *Fleet) index(key string) int {
	best, bi := uint64(0), 0
	for i, m := range f.members {
		// SHA-256, not a fast hash: FNV-1a's high bits barely depend on
		// the last bytes, so members whose URLs differ only in the port
		// took nearly every key (measured: 16 of 16).
		sum := sha256.Sum256([]byte(m.base + "\x00" + key))
		if s := binary.BigEndian.Uint64(sum[:8]); i == 0 || s > best {
			best, bi = s, i
		}
	}
	return bi
}

// Close closes every member ([Client.Close]); it returns nil.
func (f *Fleet) Close() error {
	for _, m := range f.members {
		m.Close()
	}
	return nil
}

// Isolation is the first member's (a fleet runs one backend).
func (f *Fleet) Isolation() box.Isolation { return f.members[0].Isolation() }

// Run runs req on the member its key picks (a fresh random key when req
// has none, as [Client.Run] makes). Errors as for Client.Run;
// retry an in-doubt one with [Fleet.Retry], which reaches the same member.
func (f *Fleet) Run(ctx context.Context, req remote.Request) (*box.Result, error) {
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = wire.NewKey("r-")
	}
	return f.Pick(req.IdempotencyKey).Run(ctx, req)
}

// Retry is [Client.Retry] on the member that served err's key.
func (f *Fleet) Retry(ctx context.Context, req remote.Request, err error) (*box.Result, error) {
	var ce *Error
	if !errors.As(err, &ce) || ce.Key == "" {
		return nil, err
	}
	return f.Pick(ce.Key).Retry(ctx, req, err)
}

// FleetEvaluator is [Evaluator] over a Fleet: each eval goes to the
// member its (fresh, random) key picks; a retry to the same member; a
// session lives on the member it was opened on. Its Eval has
// codemode.Evaluator's shape.
type FleetEvaluator struct {
	f   *Fleet
	evs []*Evaluator // one per member, so each keeps its in-doubt memory
}

// Evaluator returns a FleetEvaluator with rt's tools, hooks and limits.
func (f *Fleet) Evaluator(rt *glovebox.Runtime) *FleetEvaluator {
	fe := &FleetEvaluator{f: f}
	for _, m := range f.members {
		fe.evs = append(fe.evs, m.Evaluator(rt))
	}
	return fe
}

// Eval runs code on one member; see [Evaluator.Eval].
func (fe *FleetEvaluator) Eval(ctx context.Context, code string) (*glovebox.Result, error) {
	return fe.EvalWith(ctx, code, EvalOptions{})
}

// EvalWith is Eval with options; o.Key, when set, also picks the member.
func (fe *FleetEvaluator) EvalWith(ctx context.Context, code string, o EvalOptions) (*glovebox.Result, error) {
	if o.Key == "" {
		o.Key = newEvalKey()
	}
	return fe.evs[fe.f.index(o.Key)].EvalWith(ctx, code, o)
}

// Retry is [Evaluator.Retry] on the member that served err's key.
func (fe *FleetEvaluator) Retry(ctx context.Context, code string, o EvalOptions, err error) (*glovebox.Result, error) {
	var ce *Error
	if !errors.As(err, &ce) || ce.Key == "" {
		return nil, err
	}
	return fe.evs[fe.f.index(ce.Key)].Retry(ctx, code, o, err)
}

// NewSession opens a session on a member picked by a fresh random key;
// the Session talks to that member only.
func (fe *FleetEvaluator) NewSession(ctx context.Context) (*Session, error) {
	return fe.evs[fe.f.index(newEvalKey())].NewSession(ctx)
}
