package glovebox

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

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
//	ciphertext                  AES-256-GCM of the compressed body, with
//	                            every byte above as additional data
//
// The body, compressed (S2, a Snappy extension) before it is encrypted (so nothing the
// guest wrote shows through), is the manifest (what the state needs of a
// Runtime), the data-flow part (labelled values and their tokens, see
// putFlow), then the state itself; see stateBody.

const (
	stateMagic  = "GBst"
	stateFormat = 2 // 2: the data-flow part follows the manifest
	stateIDLen  = 16
	nonceLen    = 12
	// maxStateBody bounds the decompressed body, so a forged state that
	// passes no authentication anyway cannot make the host inflate
	// without limit (the body is authenticated before it is inflated;
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
	zb := getBuf()
	z := s2.Encode(zb[:cap(zb)], body)
	defer putBuf(z)
	aead := k.aeads[k.sealID]
	out := make([]byte, len(hdr), len(hdr)+len(z)+aead.Overhead())
	copy(out, hdr)
	out = aead.Seal(out, nonce[:], z, hdr)
	return out, hex.EncodeToString(id[:]), nil
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

// openState authenticates, decrypts and inflates a sealed state.
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
	if len(b) < h.n+aead.Overhead() {
		return h, nil, fmt.Errorf("%w: truncated", ErrStateInvalid)
	}
	z, err := aead.Open(getBuf(), h.nonce, b[h.n:], b[:h.n])
	if err != nil {
		return h, nil, fmt.Errorf("%w: authentication failed (the state was damaged or altered)", ErrStateInvalid)
	}
	defer putBuf(z)
	n, err := s2.DecodedLen(z)
	if err == nil && n > maxStateBody {
		err = fmt.Errorf("%d bytes is too large", n)
	}
	var body []byte
	if err == nil {
		body = getBuf()
		if cap(body) < n {
			body = make([]byte, n)
		}
		body, err = s2.Decode(body[:cap(body)], z)
	}
	if err != nil {
		return h, nil, fmt.Errorf("%w: the body does not inflate: %v", ErrStateInvalid, err)
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
// MiB allocated afresh each time cost as much in zeroing and collection
// as in compressing.
var bufs sync.Pool

func getBuf() []byte {
	if b, ok := bufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

// putBuf keeps b for reuse unless it is large (over 64 MiB).
func putBuf(b []byte) {
	if cap(b) == 0 || cap(b) > 64<<20 {
		return
	}
	b = b[:0]
	bufs.Put(&b)
}
