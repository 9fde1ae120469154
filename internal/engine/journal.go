package engine

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// An eval paused in a tool call is continued by replay: a fresh VM (for a
// session's eval, one restored to the session's state before the eval)
// runs the same eval again, and every input the host gave the guest —
// tool answers, random bytes, clock readings, the results of waits — is
// given back from the Journal instead of taken anew, so the guest takes
// the same path to the same call, where the new answer goes in and the
// eval runs on live. The guest's code is deterministic given those inputs
// (fuel counts the same too); what the journal does not hold — files in
// a mount changed meanwhile, file times and inode numbers — can make the
// replay take another path, which the journal's checks catch at the next
// input (see RATIONALE.md, "Why are paused evals replayed?").

// Journal kinds.
const (
	jRandom = 'r' // the bytes random_get gave
	jClock  = 'c' // a clock_time_get reading: 8 bytes
	jPoll   = 'p' // what poll_oneoff wrote: the events, then their count
	jCall   = 'k' // a tool call: its digest (8 bytes), then the guest's answer
)

// MaxJournal bounds a journal's bytes (tool answers included): an eval
// whose host inputs pass it can no longer be suspended.
const MaxJournal = 64 << 20

// Journal records the host's inputs to one eval, and gives back a
// recorded eval's inputs before going live.
type Journal struct {
	// CaptureBase asks Session.Eval to capture the session VM's state
	// before the eval into Base (Session.Capture's form), and how long
	// that took into CaptureTook.
	CaptureBase bool
	Base        []byte
	CaptureTook time.Duration
	// Strict makes a replay that runs out of entries a divergence instead
	// of going live: for an eval replayed to its end (see ReplayAll).
	Strict bool
	// Spent is the wall-clock time the eval ran before it was paused:
	// when the replay reaches the live point, the eval's deadline is set
	// to what it had left, and its Duration counts from Spent.
	Spent time.Duration

	log    []byte // every entry: kind, uvarint length, data
	replay []byte // the entries still to give back
	// Overflow is set once the log passed MaxJournal (or the base could
	// not be captured: Refused says why): the eval cannot be suspended.
	Overflow bool
	Refused  string
	// Diverged says how a replay went another way than the recording.
	Diverged string
	// Replayed reports that a replay gave back every entry and the eval
	// went live; LiveAt is when.
	Replayed bool
	LiveAt   time.Time
	// lastMono is the latest monotonic reading the replay gave back: the
	// live clock carries on from it.
	lastMono uint64
}

// NewJournal returns a journal that records an eval.
func NewJournal() *Journal { return &Journal{} }

// Replay returns a journal that gives back the entries of log (Log's
// form) before recording on.
func Replay(log []byte, spent time.Duration) *Journal {
	// An empty log goes live at the first input all the same (the paused
	// call asks for one), so that the eval's time left is set from Spent.
	j := &Journal{log: append([]byte(nil), log...), Spent: spent}
	j.replay = j.log[:len(j.log):len(j.log)]
	return j
}

// ReplayAll returns a journal that gives back every entry of log, for an
// eval that ended with them: asking for more is a divergence.
func ReplayAll(log []byte, spent time.Duration) *Journal {
	j := &Journal{log: append([]byte(nil), log...), Spent: spent, Strict: true}
	j.replay = j.log[:len(j.log):len(j.log)]
	return j
}

// Log returns the recorded entries (the journal owns them).
func (j *Journal) Log() []byte { return j.log }

// Replaying reports whether entries remain to be given back.
func (j *Journal) Replaying() bool { return len(j.replay) > 0 }

func (j *Journal) record(kind byte, data ...[]byte) {
	if j.Overflow {
		return
	}
	n := 0
	for _, d := range data {
		n += len(d)
	}
	if len(j.log)+n+16 > MaxJournal {
		j.Overflow, j.Refused = true, fmt.Sprintf("the eval took more than %d MiB of input from the host (tool answers, random bytes, clock readings)", MaxJournal>>20)
		return
	}
	j.log = append(j.log, kind)
	j.log = binary.AppendUvarint(j.log, uint64(n))
	for _, d := range data {
		j.log = append(j.log, d...)
	}
}

// next returns the next entry to give back, which must be of kind; ok is
// false once the replay is over (the caller takes the input live) or it
// diverged (Diverged is set).
func (j *Journal) next(kind byte) (data []byte, ok bool) {
	if len(j.replay) == 0 {
		return nil, false
	}
	k := j.replay[0]
	n, w := binary.Uvarint(j.replay[1:])
	if w <= 0 || uint64(len(j.replay)-1-w) < n {
		j.Diverged = "the journal is malformed"
		return nil, false
	}
	if k != kind {
		j.Diverged = fmt.Sprintf("the program asked the host for %s where it had asked for %s", kindName(kind), kindName(k))
		return nil, false
	}
	data = j.replay[1+w : 1+w+int(n)]
	j.replay = j.replay[1+w+int(n):]
	return data, true
}

func kindName(k byte) string {
	switch k {
	case jRandom:
		return "random bytes"
	case jClock:
		return "the time"
	case jPoll:
		return "a wait"
	case jCall:
		return "a tool call"
	}
	return fmt.Sprintf("input %q", k)
}

// Digest identifies a tool call by its name and encoded arguments.
func Digest(name string, args []byte) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(args)
	return h.Sum64()
}

// jGive gives back the next entry of kind during a replay: the data and
// true, or false when the input must be taken live. A divergence stops
// the guest (the returned error). At the end of the replay the eval goes
// live (see goLive).
//
// The flush after a trap (flushAfterTrap) is outside the eval: what it
// reads is neither recorded nor given back. A program paused inside
// Timeout.timeout left its trace hook on, and the flush's own events read
// the clock once more: recorded after the paused call, that reading made
// every replay diverge at the call.
func (v *VM) jGive(kind byte) ([]byte, bool, error) {
	j := v.req.journal()
	if j == nil || j.Replayed || v.flushing {
		return nil, false, nil
	}
	if d, ok := j.next(kind); ok {
		return d, true, nil
	}
	if j.Diverged == "" && j.Strict {
		j.Diverged = "the program asked the host for " + kindName(kind) + " after its recorded end"
	}
	if j.Diverged != "" {
		return nil, false, v.stop(StatusSandboxError, "the paused eval did not replay the same way: "+j.Diverged)
	}
	v.goLive(j)
	return nil, false, nil
}

// goLive ends a replay: from now on the eval runs on the time it had
// left when it was paused.
func (v *VM) goLive(j *Journal) {
	now := time.Now()
	j.Replayed, j.LiveAt = true, now
	// The guest's monotonic clock carries on from where the recording
	// left it, not from where the replay (which skips waits) is.
	if j.lastMono > v.monotonic(now) {
		v.monoBase, v.born = j.lastMono, now
	}
	target := now.Add(v.limits.Timeout - j.Spent)
	delta := target.Sub(v.deadline)
	v.deadline = target
	v.extended.Add(int64(delta))
}

func (r *Request) journal() *Journal {
	if r == nil {
		return nil
	}
	return r.Journal
}

// jRecord records an input the host gave live.
func (v *VM) jRecord(kind byte, data ...[]byte) {
	if j := v.req.journal(); j != nil && !v.flushing {
		j.record(kind, data...)
	}
}

// jClock gives back a recorded reading of clock id, or records t.
func (v *VM) jClock(id uint32, t uint64) (uint64, error) {
	given, ok, err := v.jGive(jClock)
	if err != nil {
		return 0, err
	}
	if ok {
		if len(given) != 8 {
			return 0, v.diverged("a clock reading of the wrong size")
		}
		t := binary.LittleEndian.Uint64(given)
		if j := v.req.journal(); id != 0 && t > j.lastMono {
			j.lastMono = t
		}
		return t, nil
	}
	var d [8]byte
	binary.LittleEndian.PutUint64(d[:], t)
	v.jRecord(jClock, d[:])
	return t, nil
}

// jRandom fills d with recorded random bytes, or fresh ones it records.
func (v *VM) jRandom(d []byte) error {
	given, ok, err := v.jGive(jRandom)
	if err != nil {
		return err
	}
	if ok {
		if len(given) != len(d) {
			return v.diverged(fmt.Sprintf("the program asked for %d random bytes where it had asked for %d", len(d), len(given)))
		}
		copy(d, given)
		return nil
	}
	rand.Read(d) // crypto/rand never fails on Linux
	v.jRecord(jRandom, d)
	return nil
}

func (v *VM) diverged(msg string) error {
	if j := v.req.journal(); j != nil && j.Diverged == "" {
		j.Diverged = msg
	}
	return v.stop(StatusSandboxError, "the paused eval did not replay the same way: "+msg)
}

// pollGiven writes what a recorded poll_oneoff wrote (its errno, then
// the events and their count), without waiting.
func (v *VM) pollGiven(c wt.Context, vals wt.Vals, given []byte, out, n, neventsPtr uint32) error {
	if len(given) < 4 {
		return v.diverged("a wait's record is malformed")
	}
	errno := binary.LittleEndian.Uint32(given)
	if errno != errnoSuccess {
		vals.SetI32(0, int32(errno))
		return nil
	}
	evs := given[4:]
	if len(evs) < 4 || (len(evs)-4)%32 != 0 || uint32((len(evs)-4)/32) > n {
		return v.diverged("a wait's record does not fit the wait")
	}
	count := uint32((len(evs) - 4) / 32)
	dst, _ := v.guest(c, out, n*32)
	copy(dst, evs[4:])
	d, _ := v.guest(c, neventsPtr, 4)
	binary.LittleEndian.PutUint32(d, count)
	vals.SetI32(0, errnoSuccess)
	return nil
}

// pollRecord records what a live poll_oneoff wrote.
func (v *VM) pollRecord(c wt.Context, vals wt.Vals, out, neventsPtr uint32) {
	var e [4]byte
	errno := vals.U32(0)
	binary.LittleEndian.PutUint32(e[:], errno)
	if errno != errnoSuccess {
		v.jRecord(jPoll, e[:])
		return
	}
	cnt, ok1 := v.guest(c, neventsPtr, 4)
	if !ok1 {
		v.jRecord(jPoll, e[:])
		return
	}
	count := binary.LittleEndian.Uint32(cnt)
	evs, ok2 := v.guest(c, out, count*32)
	if !ok2 {
		return
	}
	v.jRecord(jPoll, e[:], cnt, evs)
}

// kept is how many bytes b holds.
func (b *capBuffer) kept() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}
