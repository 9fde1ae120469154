package executor

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// DefaultMinStoreFree is Config.MinStoreFree's default: 64 MiB, a few of
// the largest records (about 17.6 MiB each) and SQLite's write-ahead log.
const DefaultMinStoreFree = 64 << 20

// minReserve is the least room a job is admitted with under its
// tenant's MaxStoredBytes: a record with its output cut to fit.
const minReserve = 64 << 10

// space tracks what the store holds per tenant, the room reserved for the
// records of jobs in flight, and whether the store's last write failed.
type space struct {
	dir     string // the store file's directory, for statfs
	minFree int64  // negative: not checked

	mu       sync.Mutex
	used     map[string]int64 // tenant → bytes of stored records
	states   map[string]int64 // tenant → bytes of stored states: sessions', paused evals'
	reserved map[string]int64 // tenant → bytes reserved by jobs in flight

	failed atomic.Pointer[string] // the last write's error, nil once one succeeds

	// The last free (statfs) and when it was read (UnixNano): a job's
	// admission reuses it for freeFor (a statfs was 13 µs of each
	// eval's processor time); /readyz reads anew.
	lastFree, freeAt atomic.Int64
}

// freeFor is how long one reading of the store's free space serves
// new jobs' admission. Our choice: min_store_free is a margin kept, not
// a guard of each write (a write that finds the disk full fails by
// itself: store_full, store_failed, and /readyz turns 503), and jobs
// admitted on a reading 50 ms old use of it only what they write.
const freeFor = 50 * time.Millisecond

func newSpace(storePath string, minFree int64, used map[string]int64) *space {
	return &space{dir: filepath.Dir(storePath), minFree: minFree, used: used, states: map[string]int64{}, reserved: map[string]int64{}}
}

// free is the bytes an unprivileged writer may still put on the store's
// file system, or -1 when statfs fails.
func (sp *space) free() int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(sp.dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// diskShort is the refusal when the store's disk has less than minFree
// left, else nil; fresh reads the free space anew, else a reading up to
// freeFor old serves.
func (sp *space) diskShort(fresh bool) *wire.Error {
	if sp.minFree < 0 {
		return nil
	}
	now := time.Now().UnixNano()
	f := sp.lastFree.Load()
	if fresh || now-sp.freeAt.Load() > int64(freeFor) {
		f = sp.free()
		sp.lastFree.Store(f)
		sp.freeAt.Store(now)
	}
	if f >= 0 && f < sp.minFree {
		return wire.Errorf(wire.CodeStoreFull, "the executor's store has %d bytes free, below its min_store_free of %d; nothing was started", f, sp.minFree)
	}
	return nil
}

// wrote notes the outcome of a store write: a failure makes the executor
// not ready until a write succeeds again.
func (sp *space) wrote(err error) {
	if err == nil {
		sp.failed.Store(nil)
		return
	}
	msg := err.Error()
	sp.failed.Store(&msg)
}

// check is the refusal of a new job of t when its quota has less than
// minReserve left, else nil.
func (sp *space) check(t *tenant) *wire.Error {
	_, err := sp.take(t, minReserve, false)
	return err
}

// reserve takes room for a record of up to want bytes in t's quota, as
// the job starts: all of it, or what is left when less; a refusal when
// under minReserve (and under want) is left. Negative: no bound.
func (sp *space) reserve(t *tenant, want int64) (int64, *wire.Error) { return sp.take(t, want, true) }

func (sp *space) take(t *tenant, want int64, keep bool) (int64, *wire.Error) {
	if t.MaxStoredBytes < 0 {
		return -1, nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	held := sp.used[t.Name] + sp.states[t.Name]
	left := t.MaxStoredBytes - held - sp.reserved[t.Name]
	got := min(want, left)
	if got < min(want, minReserve) {
		return 0, wire.Errorf(wire.CodeQuotaExceeded, "tenant %s keeps %d bytes of records, sessions' and paused evals' states (and %d reserved by jobs running), at its max_stored_bytes of %d; records and paused states are freed after the retention, a session's state when it is closed or idles out; it did not run",
			t.Name, held, sp.reserved[t.Name], t.MaxStoredBytes)
	}
	if keep {
		sp.reserved[t.Name] += got
	}
	return got, nil
}

// settle returns a reservation (negative: none) and counts a stored
// record of n bytes.
func (sp *space) settle(tenant string, reserved int64, n int) {
	sp.mu.Lock()
	if reserved > 0 {
		sp.reserved[tenant] -= reserved
	}
	sp.used[tenant] += int64(n)
	sp.mu.Unlock()
}

// stateRoom is the most bytes of states t may keep in all (its
// MaxStoredBytes less its stored records and the room its jobs in
// flight reserved for theirs): what the store checks a state write
// against (stateStore.saveSession); -1 when t has no bound.
func (sp *space) stateRoom(t *tenant) int64 {
	if t.MaxStoredBytes < 0 {
		return -1
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return max(0, t.MaxStoredBytes-sp.used[t.Name]-sp.reserved[t.Name])
}

// setStates notes the tenant's stored state bytes, as a state write
// counted them (negative: not counted; the next recount does).
func (sp *space) setStates(tenant string, n int64) {
	if n < 0 {
		return
	}
	sp.mu.Lock()
	sp.states[tenant] = n
	sp.mu.Unlock()
}

// recount reloads the stored bytes per tenant (after a purge).
func (sp *space) recount(ctx context.Context, st store) error {
	u, err := st.usage(ctx)
	if err != nil {
		return err
	}
	sp.mu.Lock()
	sp.used = u
	sp.mu.Unlock()
	return nil
}

// fitRecord is rec's JSON, cut to at most budget bytes (negative: no
// bound) by dropping output from the end of the largest part (stdout,
// stderr, an outputs file; an eval's tool-call transcript first), with
// that part's truncated flag and QuotaTruncated set. What cannot be cut
// (an eval's value, bounded by its limit) stays.
func fitRecord(rec *wire.Record, budget int64) ([]byte, error) {
	for {
		data, err := json.Marshal(rec)
		if err != nil || budget < 0 || int64(len(data)) <= budget || !cutRecord(rec, int(int64(len(data))-budget)) {
			return data, err
		}
		rec.QuotaTruncated = true
	}
}

// cutRecord drops about over bytes of JSON from rec's largest output
// part, leaving it no smaller than the next largest (which the next call
// cuts); an outputs file goes whole, first among equals. False when
// there is nothing left to cut.
func cutRecord(rec *wire.Record, over int) bool {
	type part struct {
		n    int
		file bool
		cut  func(keep int)
	}
	var parts []part
	cut := over + 16
	if r := rec.Result; r != nil {
		cut = over*3/4 + 16 // base64: 3 bytes per 4 of JSON
		parts = append(parts,
			part{len(r.Stdout), false, func(k int) { r.Stdout, r.StdoutTruncated = r.Stdout[:k], true }},
			part{len(r.Stderr), false, func(k int) { r.Stderr, r.StderrTruncated = r.Stderr[:k], true }})
		for name, data := range r.Outputs {
			parts = append(parts, part{len(data), true, func(int) { delete(r.Outputs, name); r.OutputsTruncated = true }})
		}
	} else if e := rec.Eval; e != nil {
		if len(e.ToolCalls) > 0 { // the client keeps its own transcript
			e.ToolCalls = nil
			return true
		}
		parts = append(parts,
			part{len(e.Stdout), false, func(k int) { e.Stdout, e.StdoutTruncated = strings.ToValidUTF8(e.Stdout[:k], ""), true }},
			part{len(e.Stderr), false, func(k int) { e.Stderr, e.StderrTruncated = strings.ToValidUTF8(e.Stderr[:k], ""), true }})
	}
	sort.SliceStable(parts, func(a, b int) bool {
		return parts[a].n > parts[b].n || (parts[a].n == parts[b].n && parts[a].file && !parts[b].file)
	})
	if len(parts) == 0 || parts[0].n == 0 {
		return false
	}
	p, next := parts[0], parts[1].n
	keep := max(p.n-cut, next)
	if keep == p.n { // level with the next: halve the cut, the next takes the rest
		keep = max(p.n-(cut+1)/2, 0)
	}
	p.cut(keep)
	return true
}

// storeFailedRecord is the record a job gets when its final record could
// not be stored: lost, with the reason. It is what the job's followers
// receive, and what the store holds if this smaller write succeeds.
func storeFailedRecord(rec *wire.Record, kind string, err error) *wire.Record {
	return &wire.Record{Key: rec.Key, State: wire.StateLost, Backend: rec.Backend, Created: rec.Created, Started: rec.Started, Finished: rec.Finished,
		Error: wire.Errorf(wire.CodeStoreFailed, "the %s ended (%s) but its final record could not be stored (%v): its outcome is lost, and it is never run again under this key", kind, rec.State, err)}
}
