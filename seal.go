package glovebox

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/klauspost/compress/s2"
)

// The sealed form of a state:
//
//	"GBst"                      magic
//	u8   format                 stateFormat
//	u8   kind                   stateIdle, statePaused, stateSessionPaused
//	u8   n, [n]byte             the sealing key's id
//	[16]byte                    the state id (random)
//	[12]byte                    the AES-GCM nonce (random)
//	frames, one or more:
//	  u32  m (little-endian)    the frame's length; the top bit is set
//	                            for a stored frame
//	  [m]byte                   AES-256-GCM of the frame
//
// The body (the manifest, what the state needs of a Runtime, the
// data-flow part, labelled values and their tokens, see putFlow, then
// the state itself; see stateBody) is cut into frames of frameLen bytes
// (the last may be shorter). A frame is compressed (S2, a Snappy
// extension) before it is encrypted, so nothing the guest wrote shows
// through, unless a sample of it does not compress (see compressible):
// it is then stored, sealed as it is. Frame i is sealed with the header's
// nonce whose last four bytes are XORed with i (big-endian), and with
// every header byte, i, whether it is the last frame and whether it is
// stored as additional data: a frame moved, dropped, cut, altered or
// relabelled, or the header changed, fails authentication. Frames are
// compressed and sealed, and opened and inflated, on all cores at once
// (sealing a state of 1.7 MB on one took 2–4 ms, twice the fresh-VM
// time).

const (
	stateMagic  = "GBst"
	stateFormat = 3 // 2: sealed in frames; 3: the data-flow part follows the manifest
	stateIDLen  = 16
	nonceLen    = 12
	// frameLen is the body bytes of a frame: 256 KiB, so that a state of
	// a session that wrote 1 MiB has about 7 to share out between cores,
	// and compressing one frame fits in a core's cache.
	frameLen = 256 << 10
	// frameOverhead is a frame's bytes besides its data: the length and
	// the GCM tag.
	frameOverhead = 4 + 16
	// frameStored marks a stored frame's length.
	frameStored = 1 << 31
	// maxStateBody bounds the decompressed body, so a forged state that
	// passes no authentication anyway cannot make the host inflate
	// without limit (frames are authenticated before they are inflated;
	// this guards a holder of a key). 4 GiB of memory plus a margin.
	maxStateBody = 5 << 30
)

// State kinds.
const (
	stateIdle          = 1 // an idle session
	statePaused        = 2 // a Runtime.Eval paused in a call
	stateSessionPaused = 3 // a session's eval paused in a call
)

var kindNames = map[byte]string{stateIdle: "an idle session", statePaused: "a paused eval", stateSessionPaused: "a paused session eval"}

// frameNonce and frameAD are frame i's nonce and additional data.
func frameNonce(nonce []byte, i int) []byte {
	n := [nonceLen]byte(nonce)
	x := binary.BigEndian.Uint32(n[8:]) ^ uint32(i)
	binary.BigEndian.PutUint32(n[8:], x)
	return n[:]
}

func frameAD(hdr []byte, i int, last, stored bool) []byte {
	ad := make([]byte, len(hdr), len(hdr)+5)
	copy(ad, hdr)
	ad = binary.BigEndian.AppendUint32(ad, uint32(i))
	var flags byte
	if last {
		flags |= 1
	}
	if stored {
		flags |= 2
	}
	return append(ad, flags)
}

// sealState compresses and encrypts body with k's sealing key.
func sealState(k *Keyring, kind byte, body []byte) ([]byte, string, error) {
	if k == nil {
		return nil, "", fmt.Errorf("%w: the Runtime has no StateKeys (Config.StateKeys)", ErrNotSuspendable)
	}
	var id [stateIDLen]byte
	var nonce [nonceLen]byte
	rand.Read(id[:])
	rand.Read(nonce[:])
	hdr := make([]byte, 0, 64)
	hdr = append(hdr, stateMagic...)
	hdr = append(hdr, stateFormat, kind, byte(len(k.sealID)))
	hdr = append(hdr, k.sealID...)
	hdr = append(hdr, id[:]...)
	hdr = append(hdr, nonce[:]...)
	nf := max(1, (len(body)+frameLen-1)/frameLen)
	frame := func(i int) []byte { return body[i*frameLen : min(len(body), (i+1)*frameLen)] }
	// Compress the frames that compress, each into its own part of one
	// buffer; then seal every frame, now that their places in the output
	// are known (a stored frame straight from the body).
	zmax := s2.MaxEncodedLen(frameLen)
	zb := getBuf(nf * zmax)
	defer putBuf(zb)
	zb = zb[:nf*zmax]
	zs := make([][]byte, nf)
	stored := make([]bool, nf)
	engine.Parallel(nf, func(i int) {
		if f := frame(i); compressible(f) {
			zs[i] = s2.Encode(zb[i*zmax:(i+1)*zmax], f)
		} else {
			zs[i], stored[i] = f, true
		}
	})
	size := len(hdr)
	offs := make([]int, nf)
	for i, z := range zs {
		offs[i] = size
		size += frameOverhead + len(z)
	}
	aead := k.aeads[k.sealID]
	out := newStateBuf(size)
	copy(out, hdr)
	engine.Parallel(nf, func(i int) {
		at := offs[i]
		m := uint32(len(zs[i]) + aead.Overhead())
		if stored[i] {
			m |= frameStored
		}
		binary.LittleEndian.PutUint32(out[at:], m)
		aead.Seal(out[at+4:at+4], frameNonce(nonce[:], i), zs[i], frameAD(hdr, i, i == nf-1, stored[i]))
	})
	return out, hex.EncodeToString(id[:]), nil
}

// compressible reports whether S2 is worth running on a frame: whether a
// page from its start or its middle compresses by more than 1/16. Pages of
// random or hex-digit data do not (S2 finds many short matches in hex
// digits and gains nothing by them: compressing a 256 KiB frame of them
// took as long as sealing four), while pages of a Ruby heap, carried as
// their differences from the snapshot, compress to a tenth or less.
func compressible(f []byte) bool {
	const sample = 4096
	if len(f) <= 2*sample {
		return true
	}
	var buf [sample + sample/8]byte
	for _, at := range []int{0, len(f) / 2} {
		if z := s2.Encode(buf[:], f[at:at+sample]); len(z) < sample-sample/16 {
			return true
		}
	}
	return false
}

// stateHeader is the clear part of a sealed state.
type stateHeader struct {
	format, kind byte
	keyID        string
	id           string // hex
	nonce        []byte
	n            int // header length
}

// parseHeader reads the clear header of a sealed state.
func parseHeader(b []byte) (stateHeader, error) {
	var h stateHeader
	if len(b) < len(stateMagic)+3 || string(b[:4]) != stateMagic {
		return h, fmt.Errorf("%w: not a glovebox state", ErrStateInvalid)
	}
	h.format, h.kind = b[4], b[5]
	if h.format != stateFormat {
		return h, &StateMismatchError{What: "format", State: fmt.Sprintf("version %d", h.format), Runtime: fmt.Sprintf("version %d", stateFormat)}
	}
	if kindNames[h.kind] == "" {
		return h, fmt.Errorf("%w: unknown state kind %d", ErrStateInvalid, h.kind)
	}
	n := int(b[6])
	at := 7
	if n == 0 || len(b) < at+n+stateIDLen+nonceLen {
		return h, fmt.Errorf("%w: truncated header", ErrStateInvalid)
	}
	h.keyID = string(b[at : at+n])
	at += n
	h.id = hex.EncodeToString(b[at : at+stateIDLen])
	at += stateIDLen
	h.nonce = b[at : at+nonceLen]
	h.n = at + nonceLen
	return h, nil
}

// StateID returns the id of a sealed state (its [PendingCall].ID), read
// from the state's clear header without a key: the name a [StateStore]
// records. It fails with ErrStateInvalid for bytes that are not a state
// and with ErrStateMismatch for another format version; it does not
// authenticate the state.
func StateID(state []byte) (string, error) {
	h, err := parseHeader(state)
	if err != nil {
		return "", err
	}
	return h.id, nil
}

// openState authenticates, decrypts and inflates a sealed state. No
// buffer larger than the state is allocated before every compressed frame
// is authenticated (a stored frame cannot inflate), and nothing is
// returned before every frame is.
func openState(k *Keyring, b []byte) (stateHeader, []byte, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, nil, err
	}
	if k == nil {
		return h, nil, fmt.Errorf("%w: the Runtime has no StateKeys (the state was sealed with key %q)", ErrStateKey, h.keyID)
	}
	aead := k.aeads[h.keyID]
	if aead == nil {
		return h, nil, fmt.Errorf("%w: the state was sealed with key %q, which the keyring does not hold", ErrStateKey, h.keyID)
	}
	truncated := fmt.Errorf("%w: truncated", ErrStateInvalid)
	type frame struct {
		at, m  int // where its data starts in b, and its length
		stored bool
		z      []byte // a compressed frame, decrypted
		n      int    // its body bytes
	}
	var fs []frame
	for at := h.n; at < len(b); {
		if len(b)-at < frameOverhead {
			return h, nil, truncated
		}
		m := binary.LittleEndian.Uint32(b[at:])
		f := frame{at: at + 4, m: int(m &^ frameStored), stored: m&frameStored != 0}
		if f.m < aead.Overhead() || f.m > len(b)-f.at || len(fs) > maxStateBody/frameLen {
			return h, nil, truncated
		}
		fs = append(fs, f)
		at = f.at + f.m
	}
	nf := len(fs)
	if nf == 0 {
		return h, nil, truncated
	}
	hdr := b[:h.n]
	ad := func(i int) []byte { return frameAD(hdr, i, i == nf-1, fs[i].stored) }
	// Decrypt the compressed frames, each into the same place of a buffer
	// as long as b (its plaintext is shorter by the tag).
	zb := getBuf(len(b))
	defer putBuf(zb)
	zb = zb[:len(b)]
	bad := make([]bool, nf)
	engine.Parallel(nf, func(i int) {
		f := &fs[i]
		if f.stored {
			return
		}
		z, err := aead.Open(zb[f.at:f.at], frameNonce(h.nonce, i), b[f.at:f.at+f.m], ad(i))
		f.z, bad[i] = z, err != nil
	})
	if slices.Contains(bad, true) {
		return h, nil, fmt.Errorf("%w: authentication failed (the state was damaged or altered)", ErrStateInvalid)
	}
	// Every frame but the last holds exactly frameLen bytes of the body.
	n := 0
	for i := range fs {
		f := &fs[i]
		f.n = f.m - aead.Overhead()
		if !f.stored {
			if f.n, err = s2.DecodedLen(f.z); err != nil {
				f.n = -1
			}
		}
		if f.n < 0 || f.n > frameLen || (i < nf-1 && f.n != frameLen) {
			return h, nil, fmt.Errorf("%w: the body does not inflate: frame %d", ErrStateInvalid, i)
		}
		n += f.n
	}
	body := getBuf(n)[:n]
	engine.Parallel(nf, func(i int) {
		f := &fs[i]
		dst := body[i*frameLen : i*frameLen+f.n]
		if f.stored {
			_, err := aead.Open(dst[:0], frameNonce(h.nonce, i), b[f.at:f.at+f.m], ad(i))
			bad[i] = err != nil
		} else if d, err := s2.Decode(dst, f.z); err != nil || len(d) != len(dst) || (len(d) > 0 && &d[0] != &dst[0]) {
			bad[i] = true
		}
	})
	if slices.Contains(bad, true) {
		putBuf(body)
		return h, nil, fmt.Errorf("%w: authentication failed, or the body does not inflate (the state was damaged or altered)", ErrStateInvalid)
	}
	return h, body, nil
}

// benc appends the fields of a state body.
type benc struct{ b []byte }

func (e *benc) u64(x uint64) { e.b = binary.AppendUvarint(e.b, x) }
func (e *benc) bytes(p []byte) {
	e.u64(uint64(len(p)))
	e.b = append(e.b, p...)
}
func (e *benc) str(s string) { e.u64(uint64(len(s))); e.b = append(e.b, s...) }

// bdec reads what benc wrote; the first failure sticks.
type bdec struct {
	b   []byte
	err error
}

var errShortBody = errors.New("the state body is malformed")

func (d *bdec) u64() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShortBody
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *bdec) bytes() []byte {
	n := d.u64()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errShortBody
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *bdec) str() string { return string(d.bytes()) }

// Buffers for bodies and their compressed forms, reused: a state of a few
// MiB in buffers allocated afresh cost more in page faults (about 1.4 µs
// a 4 KiB page here: 0.6 ms for a body of 1.7 MB), collector assists and
// zeroing than sealing it did, and made the slow suspensions (p99 of
// 15 ms beside a p50 of 2 ms). Reused buffers stay resident and are never
// zeroed (every byte handed out is written before it is read). They are
// kept in a few slots rather than a sync.Pool, which every collection
// empties (and with a few MiB allocated per state, collections came every
// few suspensions): at most maxBufs, at most maxBufLen each, 32 MiB in
// all. A session resumed from a state keeps its opened body until it is
// suspended or closed (see heldBuf), so a resume and a suspension in turn
// use three buffers.
const (
	maxBufs   = 4
	maxBufLen = 8 << 20
	minBufLen = 64 << 10 // smaller ones are not worth a slot
)

var bufs struct {
	mu   sync.Mutex
	free [][]byte
}

// getBuf returns an empty buffer of at least n bytes' capacity: the
// smallest kept one that is large enough, or a new one with an eighth
// more room than n (a state that grows a little between suspensions
// then still fits).
func getBuf(n int) []byte {
	bufs.mu.Lock()
	best := -1
	for i, b := range bufs.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(bufs.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := bufs.free[best]
		last := len(bufs.free) - 1
		bufs.free[best], bufs.free[last] = bufs.free[last], nil
		bufs.free = bufs.free[:last]
		bufs.mu.Unlock()
		return b[:0]
	}
	bufs.mu.Unlock()
	return make([]byte, 0, n+n/8)
}

// putBuf keeps b for reuse unless it is smaller than minBufLen or larger
// than maxBufLen; with every slot taken, it replaces the smallest kept
// buffer if b is larger.
func putBuf(b []byte) {
	if cap(b) < minBufLen || cap(b) > maxBufLen {
		return
	}
	bufs.mu.Lock()
	defer bufs.mu.Unlock()
	if len(bufs.free) < maxBufs {
		bufs.free = append(bufs.free, b[:0])
		return
	}
	small := 0
	for i, k := range bufs.free {
		if cap(k) < cap(bufs.free[small]) {
			small = i
		}
	}
	if cap(bufs.free[small]) < cap(b) {
		bufs.free[small] = b[:0]
	}
}

// heldBuf is a pooled buffer that several holders share (a resumed
// session's history and the evals running on it, which may seal its base
// into a paused state): it goes back to the pool when the last holder
// drops it, and not before, so no buffer is ever handed out while
// another session's state may still be read from it. A nil *heldBuf is a
// buffer the collector owns; hold and drop do nothing on it.
type heldBuf struct {
	b    []byte
	refs atomic.Int32
}

// newHeldBuf holds b for one holder.
func newHeldBuf(b []byte) *heldBuf {
	h := &heldBuf{b: b}
	h.refs.Store(1)
	return h
}

// hold adds a holder.
func (h *heldBuf) hold() {
	if h != nil && h.refs.Add(1) <= 1 {
		panic("glovebox: heldBuf held after its release")
	}
}

// drop removes a holder; the last one's drop gives the buffer back.
func (h *heldBuf) drop() {
	if h == nil {
		return
	}
	switch n := h.refs.Add(-1); {
	case n == 0:
		b := h.b
		h.b = nil
		poisonBuf(b)
		putBuf(b)
	case n < 0:
		panic("glovebox: heldBuf dropped more often than held")
	}
}

// poisonBuf, set by tests, overwrites a buffer given back by its last
// holder, so that a read of it afterwards shows in what it reads.
var poisonBuf = func([]byte) {}

// A sealed state belongs to its caller, so it cannot come from the kept
// buffers, and a new one of 1.6 MB got memory the Go runtime had given
// back to the system in about one suspension in ten: faulting its 388
// pages in on the suspension's path made most of its tail. So a buffer
// slightly larger than the last large state is allocated and faulted in
// ahead, on a goroutine of its own, and the next state of about its
// size is sealed into it.
const minReserve = 256 << 10 // smaller states are cheap to allocate

var reserve struct {
	mu      sync.Mutex
	b       []byte
	filling bool
}

// newStateBuf returns a new buffer of n bytes that no one else holds
// (its contents unspecified: the caller writes them all), from the
// reserve when that is large enough and at most an eighth larger, and
// has the reserve refilled for a state of about n bytes.
func newStateBuf(n int) []byte {
	if n < minReserve || n > maxBufLen {
		return make([]byte, n)
	}
	reserve.mu.Lock()
	b := reserve.b
	if cap(b) >= n && cap(b) <= n+n/8 {
		reserve.b = nil
	} else {
		b = nil
	}
	// Refill when it was taken, or when it is missing, too small, or more
	// than twice too large (a one-off large state does not pin its
	// size); a reserve a little too large waits for a state of its size.
	fill := !reserve.filling && (b != nil || reserve.b == nil || cap(reserve.b) < n || cap(reserve.b) > 2*n)
	reserve.filling = reserve.filling || fill
	reserve.mu.Unlock()
	if fill {
		go fillReserve(n + n/16)
	}
	if b == nil {
		return make([]byte, n)
	}
	return b[:n:n]
}

// fillReserve allocates the reserve and writes a byte of each of its
// pages, so that they are resident when a state is sealed into it.
func fillReserve(n int) {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 0
	}
	reserve.mu.Lock()
	reserve.b, reserve.filling = b, false
	reserve.mu.Unlock()
}
