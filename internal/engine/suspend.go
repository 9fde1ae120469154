package engine

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// A session's state between evals is its VM's linear memory and globals
// plus a few host-side values (the guest's monotonic clock, the next host
// handle). Memory is carried as the pages that differ from the VM's
// checkpoint — its state right after prepare, which any Runtime with the
// same image, tools and mounts rebuilds byte for byte (its hash says so:
// see baseHash) — or, for a VM without one (VM reuse disabled), from the
// boot snapshot. Preparing writes about 220 pages, so the checkpoint
// saves a state that much.
//
// Outside memory a VM has its WASI context (the open files), its
// file-system guard and scratch directory: between a session's evals the
// scratch directory is empty (wiped after every eval), and a session
// whose guest keeps a file open is refused (NotSuspendable), so a new VM's
// fresh context is exactly what the session had.

// stateVersion identifies the layout of Capture's bytes. Version 2 carries
// each page XORed with its base (the checkpoint's or the snapshot's page,
// zeros past the snapshot's end) instead of the page itself — pages a
// session changed in a few words are then mostly zeros, and its state
// compresses ten times smaller and several times faster — and puts the
// page list after the pages, so that one pass compares and copies them.
const stateVersion = 2

// NotSuspendable says why a VM cannot be captured now.
type NotSuspendable struct{ Reason string }

func (e *NotSuspendable) Error() string { return e.Reason }

// BaseMismatch is RestoreSession's refusal of a state diffed against
// another prepared state than this engine's VMs have.
type BaseMismatch struct{ State, Here string }

func (e *BaseMismatch) Error() string {
	return fmt.Sprintf("the state was taken against prepared VM %s, this engine's is %s", e.State, e.Here)
}

// Capture appends the session's state (see above) to dst. When dst has
// no room for it, grow(dst, n) must return a buffer holding dst's bytes
// with room for n more (a nil grow allocates one); Capture then appends
// there and leaves dst as it was. A session that has no VM yet has a
// state all the same: a fresh VM's. It fails with ErrClosed after Close
// and with *NotSuspendable when the guest keeps files open.
func (s *Session) Capture(dst []byte, grow func(dst []byte, n int) []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.vm == nil {
		return append(dst, FreshState()...), nil
	}
	return s.vm.capture(dst, grow)
}

// growTo returns dst, or with grow (see Session.Capture) or a new
// allocation its bytes in a buffer, with room for n more bytes. It never
// copies more than len(dst) bytes (slices.Grow copies its whole capacity).
func growTo(dst []byte, n int, grow func(dst []byte, n int) []byte) []byte {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	if grow != nil {
		if b := grow(dst, n); cap(b)-len(b) >= n && len(b) == len(dst) {
			return b
		}
	}
	b := make([]byte, len(dst), len(dst)+n)
	copy(b, dst)
	return b
}

// FreshState is the state of a session that has no VM yet (a fresh VM's),
// as Capture gives it.
func FreshState() []byte { return []byte{stateVersion, 0} }

const (
	flagVM         = 1 // the state has a VM (else it is a fresh session's)
	flagCheckpoint = 2 // pages are diffed against the VM's checkpoint
)

func (v *VM) capture(dst []byte, grow func(dst []byte, n int) []byte) ([]byte, error) {
	if len(v.jsvals) != 0 {
		return nil, &NotSuspendable{Reason: "the guest holds host values"}
	}
	if !v.fs.onlyPreopens() {
		return nil, &NotSuspendable{Reason: "the guest keeps files open (close them before suspending: an open file cannot be carried to another process)"}
	}
	c := v.store.Context()
	useCk := v.ck != nil && v.inst.HasCheckpoint()
	runs, written, err := v.inst.Written()
	if err != nil {
		return nil, &NotSuspendable{Reason: "the VM's memory cannot be scanned: " + err.Error()}
	}
	mem := v.mem.Data(c)
	imgPages := v.inst.ImageLen() / wt.PageSize
	var grown []uint32
	for p := imgPages; p < len(mem)/wt.PageSize; p++ {
		if !isZero(mem[p*wt.PageSize : (p+1)*wt.PageSize]) {
			grown = append(grown, uint32(p))
		}
	}
	flags := byte(flagVM)
	var base uint64
	if useCk {
		flags |= flagCheckpoint
		base = v.baseHash()
	}
	most := written + len(grown)
	// The page list takes at most 3 bytes a page (page numbers are below
	// 2^21 as deltas, each at most a uvarint of 3 bytes).
	b := growTo(dst, 64+8*len(v.e.baseGlobals())+most*(wt.PageSize+3), grow)
	b = append(b, stateVersion, flags)
	b = binary.LittleEndian.AppendUint64(b, base)
	b = binary.AppendUvarint(b, uint64(len(mem)))
	b = binary.AppendUvarint(b, uint64(len(v.e.baseGlobals())))
	for _, g := range v.e.baseGlobals() {
		bits, ok := v.inst.GlobalBits(c, g.name)
		if !ok {
			return nil, &NotSuspendable{Reason: "the VM lacks global " + g.name}
		}
		b = binary.LittleEndian.AppendUint64(b, bits)
	}
	b = binary.AppendUvarint(b, v.monoBase)
	b = binary.AppendUvarint(b, uint64(v.nextJS))
	countAt := len(b)
	b = append(b, 0, 0, 0, 0)
	// Each core compares and XORs a share of the written pages into its
	// own part of the data; the parts are then closed up.
	at := len(b)
	b = b[:at+written*wt.PageSize]
	pages := make([]uint32, written, most)
	shares := runShares(runs, written)
	kept := make([]int, len(shares))
	Parallel(len(shares), func(i int) {
		sh := shares[i]
		kept[i] = v.inst.DiffXOR(!useCk, sh.runs, pages[sh.first:], b[at+sh.first*wt.PageSize:])
	})
	n := 0
	for i, sh := range shares {
		copy(pages[n:], pages[sh.first:sh.first+kept[i]])
		copy(b[at+n*wt.PageSize:], b[at+sh.first*wt.PageSize:at+(sh.first+kept[i])*wt.PageSize])
		n += kept[i]
	}
	pages, b = pages[:n], b[:at+n*wt.PageSize]
	for _, p := range grown { // their base is zeros
		pages = append(pages, p)
		b = append(b, mem[int(p)*wt.PageSize:int(p+1)*wt.PageSize]...)
	}
	binary.LittleEndian.PutUint32(b[countAt:], uint32(len(pages)))
	prev := uint32(0)
	for _, p := range pages {
		b = binary.AppendUvarint(b, uint64(p-prev))
		prev = p
	}
	return b, nil
}

// runShare is a share of a capture's written pages: runs as
// wt.Instance.Written gives them, and the index of its first page among
// all of them.
type runShare struct {
	runs  []uint64
	first int
}

// runShares cuts runs (of total pages) into shares of about equal pages,
// one for each of pageShares(total), splitting a run where a share ends.
func runShares(runs []uint64, total int) []runShare {
	k := len(pageShares(total))
	out := make([]runShare, k)
	for i := range out {
		out[i].first = i * total / k
	}
	sh, at := 0, 0
	for j := 0; j+1 < len(runs); j += 2 {
		first, n := runs[j], int(runs[j+1])
		for n > 0 {
			for sh+1 < k && at >= out[sh+1].first {
				sh++
			}
			end := total
			if sh+1 < k {
				end = out[sh+1].first
			}
			take := min(n, end-at)
			out[sh].runs = append(out[sh].runs, first, uint64(take))
			first, n, at = first+uint64(take), n-take, at+take
		}
	}
	return out
}

// Parallel runs f(0) to f(n-1) on as many goroutines as there are cores
// (the caller's among them), and returns when all have returned: for
// copying, compressing and sealing a state's pages, which on one core
// took several times a fresh VM's time.
func Parallel(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			f(i)
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// pageShares cuts n pages into as many shares as there are cores, each
// at least minShare pages (one share for fewer), as [start, end) pairs.
func pageShares(n int) [][2]int {
	const minShare = 64
	k := max(1, min(runtime.GOMAXPROCS(0), n/minShare))
	shares := make([][2]int, k)
	for i := range k {
		shares[i] = [2]int{i * n / k, (i + 1) * n / k}
	}
	return shares
}

var zeroPage [wt.PageSize]byte

func isZero(p []byte) bool { return bytes.Equal(p, zeroPage[:]) }

// baseGlobals are the globals a state carries: the module's mutable
// globals, as the snapshot lists them (the same for every layout).
func (e *Engine) baseGlobals() []globalValue { return e.base.globals }

// baseHash identifies v's checkpoint: its memory's hash and its globals'
// values, computed once per checkpoint.
func (v *VM) baseHash() uint64 {
	if v.ck.hash == 0 {
		h := v.inst.CheckpointHash()
		for _, bits := range v.ck.bits {
			h = (h ^ bits) * 1099511628211
		}
		v.ck.hash = h | 1
	}
	return v.ck.hash
}

// Identity names what a state taken in e's VMs depends on: the guest
// interface version, the image, the compiled code's settings (metering
// included) and the snapshot's layout version.
func (e *Engine) Identity() string { return Version + "/" + e.cacheDir[len(e.cacheDir)-24:] }

// SnapshotID names the boot snapshot p's VMs start from: its cache key
// and the guest clock it was captured at, which differs between builds
// of the same key (a rebuilt snapshot is not byte for byte the same, so a
// state taken against one cannot be applied to the other).
func (p *Pool) SnapshotID() string {
	return fmt.Sprintf("%s@%d", filepath.Base(p.snap.dir), p.snap.mono)
}

// A Segment is a part of a state (Capture's bytes) that changes apart
// from the others: [Start, End) and a Key naming it from one state to
// the next — the header, the pages of one range of SegmentPages guest
// pages, or the page list. The sealer cuts its frames there, so that the
// frames of pages a later eval did not touch stay byte for byte the same.
type Segment struct {
	Start, End int
	Key        uint64
}

// SegmentPages is the guest pages a page segment covers (256 KiB).
const SegmentPages = 64

// Segment keys besides a page range's (the range's number, below
// 1 GiB / SegmentPages / 4 KiB).
const (
	SegmentHeader = 1<<32 + iota
	SegmentList
)

// Segments cuts state (Capture's bytes) into its segments, in order,
// covering it; nil when it is malformed (the sealer then cuts it as it
// would any bytes).
func Segments(state []byte) []Segment {
	if len(state) < 2 || state[0] != stateVersion {
		return nil
	}
	if state[1]&flagVM == 0 {
		return []Segment{{0, len(state), SegmentHeader}}
	}
	at := 10
	bad := false
	uv := func() uint64 {
		if at > len(state) {
			bad = true
			return 0
		}
		x, n := binary.Uvarint(state[at:])
		if n <= 0 {
			bad = true
			return 0
		}
		at += n
		return x
	}
	uv() // memory size
	if ng := uv(); ng > uint64(len(state)) {
		return nil
	} else {
		at += int(ng) * 8
	}
	uv() // monotonic clock
	uv() // next host handle
	if bad || at+4 > len(state) {
		return nil
	}
	np := int(binary.LittleEndian.Uint32(state[at:]))
	at += 4
	data := at
	if np > (len(state)-data)/wt.PageSize {
		return nil
	}
	segs := []Segment{{0, data, SegmentHeader}}
	at = data + np*wt.PageSize
	list := at
	prev, start, key := uint64(0), data, uint64(0)
	for i := range np {
		p := prev + uv()
		if bad {
			return nil
		}
		if k := p / SegmentPages; i == 0 || k != key {
			if i > 0 {
				segs = append(segs, Segment{start, data + i*wt.PageSize, key})
			}
			start, key = data+i*wt.PageSize, k
		}
		prev = p
	}
	if np > 0 {
		segs = append(segs, Segment{start, list, key})
	}
	return append(segs, Segment{list, len(state), SegmentList})
}

// errBadState is wrapped by RestoreSession's refusals of malformed bytes.
var errBadState = errors.New("malformed session state")

// sessionState is Capture's bytes, decoded.
type sessionState struct {
	flags   byte
	base    uint64
	memLen  uint64
	globals []uint64
	mono    uint64
	nextJS  uint32
	pages   []uint32
	data    []byte
}

func decodeSessionState(b []byte, nglobals int) (*sessionState, error) {
	if len(b) < 2 || b[0] != stateVersion {
		return nil, fmt.Errorf("%w: unknown version", errBadState)
	}
	st := &sessionState{flags: b[1]}
	if st.flags&flagVM == 0 {
		return st, nil
	}
	b = b[2:]
	if len(b) < 8 {
		return nil, errBadState
	}
	st.base = binary.LittleEndian.Uint64(b)
	b = b[8:]
	bad := false
	uv := func() uint64 {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return x
	}
	st.memLen = uv()
	if ng := uv(); bad || ng != uint64(nglobals) || uint64(len(b)) < ng*8 {
		return nil, fmt.Errorf("%w: globals", errBadState)
	}
	for range nglobals {
		st.globals = append(st.globals, binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	st.mono = uv()
	st.nextJS = uint32(uv())
	if bad || len(b) < 4 {
		return nil, fmt.Errorf("%w: memory", errBadState)
	}
	np := uint64(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if st.memLen > maxMemory || st.memLen%(64<<10) != 0 || np > st.memLen/wt.PageSize || np*wt.PageSize > uint64(len(b)) {
		return nil, fmt.Errorf("%w: memory", errBadState)
	}
	st.data, b = b[:np*wt.PageSize], b[np*wt.PageSize:]
	st.pages = make([]uint32, np)
	prev := uint64(0)
	for i := range st.pages {
		p := prev + uv()
		if bad || (i > 0 && p == prev) || p >= st.memLen/wt.PageSize {
			return nil, fmt.Errorf("%w: page list", errBadState)
		}
		st.pages[i], prev = uint32(p), p
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: page list", errBadState)
	}
	return st, nil
}

// RestoreSession makes a session of p whose VM has the state Capture
// returned. It fails with ErrClosed, a *BaseMismatch, or an error
// wrapping errBadState.
func (p *Pool) RestoreSession(state []byte) (*Session, error) {
	st, err := decodeSessionState(state, len(p.e.baseGlobals()))
	if err != nil {
		return nil, err
	}
	s, err := p.NewSession()
	if err != nil {
		return nil, err
	}
	if st.flags&flagVM == 0 {
		return s, nil
	}
	v, err := p.restoreVM(st)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.vm = v
	return s, nil
}

// restoreVM gets a VM at the state's base and applies the state to it.
func (p *Pool) restoreVM(st *sessionState) (*VM, error) {
	var v *VM
	if st.flags&flagCheckpoint != 0 {
		var err error
		if v, err = p.get(); err != nil {
			return nil, err
		}
		if v.ck == nil || !v.inst.HasCheckpoint() {
			p.e.recycle(v)
			return nil, &BaseMismatch{State: fmt.Sprintf("%016x", st.base), Here: "none (VM reuse is disabled)"}
		}
		if h := v.baseHash(); h != st.base {
			p.e.recycle(v)
			return nil, &BaseMismatch{State: fmt.Sprintf("%016x", st.base), Here: fmt.Sprintf("%016x", h)}
		}
	} else {
		if _, err := checkMounts(p.mounts); err != nil {
			return nil, err
		}
		var err error
		if v, err = p.e.newVM(p.snap, p.mounts, p.scratch, p.idle.memGroup()); err != nil {
			return nil, err
		}
		v.prepared = true
	}
	if err := v.apply(st); err != nil {
		v.close() // half-written: never rewound
		return nil, err
	}
	return v, nil
}

// apply writes a decoded state into v, which is at the state's base.
func (v *VM) apply(st *sessionState) error {
	c := v.store.Context()
	mem := v.mem.Data(c)
	if uint64(len(mem)) > st.memLen {
		return fmt.Errorf("%w: memory smaller than the base", errBadState)
	}
	if grow := (st.memLen - uint64(len(mem))) / (64 << 10); grow > 0 {
		if err := v.mem.Grow(c, grow); err != nil {
			return err
		}
		mem = v.mem.Data(c)
	}
	// Fault each run of pages in at once, then XOR the state's in, each
	// core a share of the pages.
	shares := pageShares(len(st.pages))
	Parallel(len(shares), func(k int) {
		for i, end := shares[k][0], shares[k][1]; i < end; {
			j := i + 1
			for j < end && st.pages[j] == st.pages[j-1]+1 {
				j++
			}
			off := int(st.pages[i]) * wt.PageSize
			run := mem[off : off+(j-i)*wt.PageSize]
			v.inst.PopulateWrite(mem, int(st.pages[i]), j-i)
			subtle.XORBytes(run, run, st.data[i*wt.PageSize:j*wt.PageSize])
			i = j
		}
	})
	for i, g := range v.e.baseGlobals() {
		if err := v.inst.SetGlobalBits(c, g.name, st.globals[i]); err != nil {
			return err
		}
	}
	v.monoBase, v.nextJS = st.mono, st.nextJS
	v.cleanEnd = true
	return nil
}
