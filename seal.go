package glovebox

import (
	"bytes"
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
//	[12]byte                    the index's AES-GCM nonce (random)
//	u32  m, [m]byte             the index: AES-256-GCM, with the header as
//	                            additional data, of
//	                              uvarint k   the number of data frames
//	                              k times: u8 flags (1: stored),
//	                              [12]byte nonce, [16]byte tag
//	data frames, k of them (one or more):
//	  u32  m (little-endian)    the frame's length; the top bit is set
//	                            for a stored frame
//	  [m]byte                   AES-256-GCM of the frame, with its own
//	                            nonce (random) and, as additional data,
//	                            "GBfr", its number and whether it is the
//	                            last and stored
//
// The body (the manifest, what the state needs of a Runtime, the
// data-flow part, labelled values and their tokens, see putFlow, then
// the state itself; see stateBody) is cut into frames of at most
// frameLen bytes: for an idle session's state a frame ends where the
// guest's pages begin, and from there every frameLen bytes (64 pages),
// so that a page changed in one frame leaves the others as they were.
// A frame is compressed (S2, a Snappy extension) before it is encrypted,
// so nothing the guest wrote shows through, unless a sample of it does
// not compress (see compressible): it is then stored, sealed as it is.
//
// The index binds the frames to the state: its tags and nonces are the
// frames', in order, and it is authenticated with the header (the state
// id among it), so a frame moved, dropped, cut, altered, relabelled or
// taken from another state, or the header changed, fails. A data frame
// is sealed under its own nonce, not the state's, so that a session
// suspended again reuses the sealed bytes of every frame whose body
// bytes did not change since the state it was resumed from (or its last
// Checkpoint): a session resumed, run and suspended re-encrypts the
// frames its evals changed, not its whole heap (see frameCache). Frames
// are compressed and sealed, and opened and inflated, on all cores at
// once (sealing a state of 1.7 MB on one took 2-4 ms, twice the fresh-VM
// time).

const (
	stateMagic  = "GBst"
	stateFormat = 4 // 2: sealed in frames; 3: the data-flow part follows the manifest; 4: an index, frames under their own nonces
	stateIDLen  = 16
	nonceLen    = 12
	tagLen      = 16
	// frameLen is the body bytes of a frame at most: 256 KiB (64 pages),
	// so that a state of a session that wrote 1 MiB has about 7 to share
	// out between cores, and compressing one frame fits in a core's cache.
	frameLen = 256 << 10
	// frameOverhead is a frame's bytes besides its data: the length and
	// the GCM tag.
	frameOverhead = 4 + tagLen
	// indexEntry is an index entry's bytes: flags, nonce and tag.
	indexEntry = 1 + nonceLen + tagLen
	// frameStored marks a stored frame's length.
	frameStored = 1 << 31
	// maxStateBody bounds the decompressed body, so a forged state that
	// passes no authentication anyway cannot make the host inflate
	// without limit (frames are authenticated before they are inflated;
	// this guards a holder of a key). 4 GiB of memory plus a margin.
	maxStateBody = 5 << 30
	// maxFrames bounds a state's frames: maxStateBody in full frames.
	maxFrames = maxStateBody / frameLen
	// segmentMin is the body size above which an idle session's state is
	// cut where its parts change apart, for reuse (see bodySegments):
	// sealing 1 MiB takes about 0.3 ms here.
	segmentMin = 1 << 20
)

// State kinds.
const (
	stateIdle          = 1 // an idle session
	statePaused        = 2 // a Runtime.Eval paused in a call
	stateSessionPaused = 3 // a session's eval paused in a call
)

var kindNames = map[byte]string{stateIdle: "an idle session", statePaused: "a paused eval", stateSessionPaused: "a paused session eval"}

// frameAD is a data frame's additional data: whether it is stored. Its
// place is bound by the index, not here, so that its sealed bytes can be
// reused at another place in a later state.
func frameAD(stored bool) []byte {
	ad := []byte("GBfr\x00")
	if stored {
		ad[4] = 1
	}
	return ad
}

// A segment is a part of a body that a frame (or, when longer than
// frameLen, frames) holds alone, and the key that names it from one
// state of a session to the next (see engine.Segment).
type segment struct {
	start, end int
	key        uint64
}

// bodySegments cuts an idle session's body, whose engine state (see
// engine.Segments) starts at prefix, into segments: the manifest and
// data-flow part, then the engine's. A body of segmentMin or less, or a
// malformed one, is one segment: sealing it again costs little, and a
// frame per segment would grow it by an index entry and a tag each (the
// state of a session that ran x = 1, 4.5 KB, by a fifth).
func bodySegments(body []byte, prefix int) []segment {
	es := engine.Segments(body[prefix:])
	if es == nil || len(body) <= segmentMin {
		return []segment{{0, len(body), 0}}
	}
	segs := []segment{{0, prefix, 0}}
	for _, e := range es {
		segs = append(segs, segment{prefix + e.Start, prefix + e.End, e.Key + 1})
	}
	return segs
}

// frameBounds cuts a body of n bytes into frames of at most frameLen
// bytes, one or more per segment of segs (nil: the body is one), each
// with a key: its segment's and its place in it. Empty segments make no
// frame; an empty body makes one empty frame.
func frameBounds(n int, segs []segment) []segment {
	if segs == nil {
		segs = []segment{{0, n, 0}}
	}
	var out []segment
	for _, sg := range segs {
		for at, piece := sg.start, uint64(0); at < sg.end; at, piece = at+frameLen, piece+1 {
			out = append(out, segment{at, min(sg.end, at+frameLen), sg.key<<20 | piece})
		}
	}
	if len(out) == 0 {
		out = append(out, segment{0, 0, 0})
	}
	return out
}

// frameCache is what a session keeps of its last state, opened
// (ResumeSession) or sealed (Checkpoint), for its next to reuse: the
// body and, for each data frame, its key (see frameBounds), where it lay
// in the body and its sealed bytes. A frame of the next body with the
// same key and the same bytes, sealed with the same key, is copied
// instead of compressed and encrypted again. A nil *frameCache reuses
// nothing.
type frameCache struct {
	keyID  string
	body   *heldBuf // holds the body's buffer
	frames map[uint64]cachedFrame
	list   []cachedFrame // the frames in order, as opened, until keyed (cacheFrames)
	sealed []byte        // the data frames, as sealed: lengths and AES-GCM output
}

type cachedFrame struct {
	start, end int // in the body
	at, m      int // the frame in sealed: its AES-GCM output and length
	stored     bool
	nonce      [nonceLen]byte
}

// release lets go of c's body and gives its sealed bytes back for reuse.
func (c *frameCache) release() {
	if c != nil {
		c.body.drop()
		putBuf(c.sealed)
		c.sealed = nil
	}
}

// reusable returns the sealed frame of c that frame f of body can be
// instead, or nil.
func (c *frameCache) reusable(keyID string, body []byte, f segment) *cachedFrame {
	if c == nil || c.keyID != keyID {
		return nil
	}
	old, ok := c.frames[f.key]
	if !ok || old.end-old.start != f.end-f.start || old.end > len(c.body.b) || !bytes.Equal(body[f.start:f.end], c.body.b[old.start:old.end]) {
		return nil
	}
	return &old
}

// sealState compresses and encrypts body with k's sealing key.
func sealState(k *Keyring, kind byte, body []byte) ([]byte, string, error) {
	st, id, _, err := sealFrames(k, kind, body, nil, nil, false)
	return st, id, err
}

// sealFrames seals body (see sealState) in frames cut at segs (see
// frameBounds), reusing the frames of reuse that did not change; with
// keep, it also returns the cache of the new state for the next seal,
// holding body (whose buffer the caller then must not reuse).
func sealFrames(k *Keyring, kind byte, body []byte, segs []segment, reuse *frameCache, keep bool) ([]byte, string, *frameCache, error) {
	if k == nil {
		return nil, "", nil, fmt.Errorf("%w: the Runtime has no StateKeys (Config.StateKeys)", ErrNotSuspendable)
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
	bounds := frameBounds(len(body), segs)
	nf := len(bounds)
	// Take the frames that did not change from reuse; compress the others
	// that compress, each into its own part of one buffer; then seal every
	// new frame, now that their places in the output are known (a stored
	// frame straight from the body).
	fs := make([]cachedFrame, nf)
	old := make([]*cachedFrame, nf)
	zs := make([][]byte, nf)
	zat := make([]int, nf+1) // frame i compresses into zb[zat[i]:zat[i+1]]
	nonces := make([]byte, nf*nonceLen)
	rand.Read(nonces)
	for i := range fs {
		fs[i].start, fs[i].end = bounds[i].start, bounds[i].end
		copy(fs[i].nonce[:], nonces[i*nonceLen:])
		zat[i+1] = zat[i] + s2.MaxEncodedLen(fs[i].end-fs[i].start)
	}
	zb := getBuf(zat[nf])
	defer putBuf(zb)
	zb = zb[:zat[nf]]
	engine.Parallel(nf, func(i int) {
		f := &fs[i]
		if old[i] = reuse.reusable(k.sealID, body, bounds[i]); old[i] != nil {
			f.stored, f.nonce = old[i].stored, old[i].nonce
			return
		}
		if fr := body[f.start:f.end]; compressible(fr) {
			zs[i] = s2.Encode(zb[zat[i]:zat[i+1]], fr)
		} else {
			zs[i], f.stored = fr, true
		}
	})
	aead := k.aeads[k.sealID]
	idxLen := binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(nf)) + nf*indexEntry
	size := len(hdr) + 4 + idxLen + aead.Overhead()
	framesAt := size
	for i := range fs {
		fs[i].at = size + 4
		if old[i] != nil {
			fs[i].m = old[i].m
		} else {
			fs[i].m = len(zs[i]) + aead.Overhead()
		}
		size += 4 + fs[i].m
	}
	out := newStateBuf(size)
	copy(out, hdr)
	engine.Parallel(nf, func(i int) {
		f := &fs[i]
		if old[i] != nil {
			copy(out[f.at-4:f.at+f.m], reuse.sealed[old[i].at-4:old[i].at+old[i].m])
			return
		}
		m := uint32(f.m)
		if f.stored {
			m |= frameStored
		}
		binary.LittleEndian.PutUint32(out[f.at-4:], m)
		aead.Seal(out[f.at:f.at], f.nonce[:], zs[i], frameAD(f.stored))
	})
	idx := binary.AppendUvarint(make([]byte, 0, idxLen), uint64(nf))
	for i := range fs {
		f := &fs[i]
		idx = append(idx, b2byte(f.stored))
		idx = append(idx, f.nonce[:]...)
		idx = append(idx, out[f.at+f.m-tagLen:f.at+f.m]...)
	}
	at := len(hdr)
	binary.LittleEndian.PutUint32(out[at:], uint32(idxLen+aead.Overhead()))
	aead.Seal(out[at+4:at+4], nonce[:], idx, hdr)
	var next *frameCache
	if keep {
		next = &frameCache{keyID: k.sealID, body: newHeldBuf(body), frames: make(map[uint64]cachedFrame, nf),
			sealed: append(getBuf(size-framesAt), out[framesAt:]...)}
		for i, f := range fs {
			f.at -= framesAt
			next.frames[bounds[i].key] = f
		}
	}
	return out, hex.EncodeToString(id[:]), next, nil
}

// cacheFrames makes c, a state's frames as openFrames found them, the
// cache of body (its segments segs, see bodySegments), keyed as
// sealFrames keys them; nil when the frames are not cut as segs would
// cut them (a state sealed otherwise: nothing is reused then).
func cacheFrames(c *frameCache, body []byte, segs []segment) *frameCache {
	if c == nil {
		return nil
	}
	bounds := frameBounds(len(body), segs)
	if len(bounds) != len(c.list) {
		c.release()
		return nil
	}
	c.frames = make(map[uint64]cachedFrame, len(bounds))
	for i, b := range bounds {
		f := c.list[i]
		if f.start != b.start || f.end != b.end {
			c.release()
			return nil
		}
		c.frames[b.key] = f
	}
	c.list = nil
	return c
}

func b2byte(b bool) byte {
	if b {
		return 1
	}
	return 0
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
	h, body, _, err := openFrames(k, b, false)
	return h, body, err
}

// openFrames is openState; with keep, it also returns the state's frames
// for a frameCache (see cacheFrames), without a body yet: the caller
// holds the returned body for it.
func openFrames(k *Keyring, b []byte, keep bool) (stateHeader, []byte, *frameCache, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, nil, nil, err
	}
	if k == nil {
		return h, nil, nil, fmt.Errorf("%w: the Runtime has no StateKeys (the state was sealed with key %q)", ErrStateKey, h.keyID)
	}
	aead := k.aeads[h.keyID]
	if aead == nil {
		return h, nil, nil, fmt.Errorf("%w: the state was sealed with key %q, which the keyring does not hold", ErrStateKey, h.keyID)
	}
	truncated := fmt.Errorf("%w: truncated", ErrStateInvalid)
	damaged := fmt.Errorf("%w: authentication failed (the state was damaged or altered)", ErrStateInvalid)
	hdr := b[:h.n]
	// The index first: it says what the frames must be.
	if len(b)-h.n < frameOverhead {
		return h, nil, nil, truncated
	}
	im := int(binary.LittleEndian.Uint32(b[h.n:]))
	if im < aead.Overhead() || im > len(b)-h.n-4 {
		return h, nil, nil, truncated
	}
	idx, err := aead.Open(nil, h.nonce, b[h.n+4:h.n+4+im], hdr)
	if err != nil {
		return h, nil, nil, damaged
	}
	nf, w := binary.Uvarint(idx)
	if w <= 0 || nf == 0 || nf > maxFrames || uint64(len(idx)-w) != nf*indexEntry {
		return h, nil, nil, fmt.Errorf("%w: the frame index is malformed", ErrStateInvalid)
	}
	idx = idx[w:]
	type frame struct {
		cachedFrame
		z []byte // a compressed frame, decrypted
		n int    // its body bytes
	}
	fs := make([]frame, nf)
	framesAt := h.n + 4 + im
	at := framesAt
	for i := range fs {
		f := &fs[i]
		e := idx[i*indexEntry : (i+1)*indexEntry]
		copy(f.nonce[:], e[1:])
		if len(b)-at < frameOverhead {
			return h, nil, nil, truncated
		}
		m := binary.LittleEndian.Uint32(b[at:])
		f.at, f.m, f.stored = at+4, int(m&^frameStored), m&frameStored != 0
		if f.m < aead.Overhead() || f.m > len(b)-f.at {
			return h, nil, nil, truncated
		}
		if f.stored != (e[0] == 1) || e[0] > 1 || !bytes.Equal(b[f.at+f.m-tagLen:f.at+f.m], e[1+nonceLen:]) {
			return h, nil, nil, damaged
		}
		at = f.at + f.m
	}
	if at != len(b) {
		return h, nil, nil, fmt.Errorf("%w: bytes after the last frame", ErrStateInvalid)
	}
	ad := func(i int) []byte { return frameAD(fs[i].stored) }
	// Decrypt the compressed frames, each into the same place of a buffer
	// as long as b (its plaintext is shorter by the tag).
	zb := getBuf(len(b))
	defer putBuf(zb)
	zb = zb[:len(b)]
	bad := make([]bool, nf)
	// With keep, each frame's sealed bytes are copied for the cache as
	// they are decrypted, while they are in the core's cache.
	var sealed []byte
	if keep {
		sealed = getBuf(len(b) - framesAt)[:len(b)-framesAt]
	}
	keepFrame := func(f *frame) {
		if keep {
			copy(sealed[f.at-4-framesAt:], b[f.at-4:f.at+f.m])
		}
	}
	engine.Parallel(len(fs), func(i int) {
		f := &fs[i]
		if f.stored {
			return
		}
		z, err := aead.Open(zb[f.at:f.at], f.nonce[:], b[f.at:f.at+f.m], ad(i))
		f.z, bad[i] = z, err != nil
		keepFrame(f)
	})
	if slices.Contains(bad, true) {
		putBuf(sealed)
		return h, nil, nil, damaged
	}
	// Each frame holds at most frameLen bytes of the body.
	n := 0
	for i := range fs {
		f := &fs[i]
		f.n = f.m - aead.Overhead()
		if !f.stored {
			if f.n, err = s2.DecodedLen(f.z); err != nil {
				f.n = -1
			}
		}
		if f.n < 0 || f.n > frameLen {
			putBuf(sealed)
			return h, nil, nil, fmt.Errorf("%w: the body does not inflate: frame %d", ErrStateInvalid, i)
		}
		f.start, f.end = n, n+f.n
		n += f.n
	}
	body := getBuf(n)[:n]
	engine.Parallel(len(fs), func(i int) {
		f := &fs[i]
		dst := body[f.start:f.end]
		if f.stored {
			_, err := aead.Open(dst[:0], f.nonce[:], b[f.at:f.at+f.m], ad(i))
			bad[i] = err != nil
			keepFrame(f)
		} else if d, err := s2.Decode(dst, f.z); err != nil || len(d) != len(dst) || (len(d) > 0 && &d[0] != &dst[0]) {
			bad[i] = true
		}
	})
	if slices.Contains(bad, true) {
		putBuf(body)
		putBuf(sealed)
		return h, nil, nil, fmt.Errorf("%w: authentication failed, or the body does not inflate (the state was damaged or altered)", ErrStateInvalid)
	}
	var c *frameCache
	if keep {
		c = &frameCache{keyID: h.keyID, list: make([]cachedFrame, nf), sealed: sealed}
		for i := range fs {
			c.list[i] = fs[i].cachedFrame
			c.list[i].at -= framesAt
		}
	}
	return h, body, c, nil
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
// few suspensions): at most maxBufs, at most maxBufLen each, 48 MiB in
// all. A session resumed from a state keeps its opened body and its
// sealed frames until it is suspended or closed (see heldBuf and
// frameCache), so a resume and a suspension in turn use five buffers.
const (
	maxBufs   = 6
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
