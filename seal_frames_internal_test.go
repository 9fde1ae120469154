package glovebox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/klauspost/compress/s2"
)

// TestS2Stored: a stored block is a valid S2 block of its input, for
// every length form of the literal.
func TestS2Stored(t *testing.T) {
	for _, n := range []int{0, 1, 59, 60, 61, 255, 256, 257, 65535, 65536, 65537, frameLen, 1<<24 + 3} {
		src := make([]byte, n)
		rand.Read(src)
		got, err := s2.Decode(nil, s2Stored(make([]byte, s2.MaxEncodedLen(n)), src))
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
}

// TestSealFrames: bodies of many frames, compressible or not, open to
// themselves; moving, dropping or repeating a frame is refused as
// invalid.
func TestSealFrames(t *testing.T) {
	random := make([]byte, 3*frameLen/2)
	rand.Read(random)
	mixed := append(bytes.Repeat([]byte("glovebox "), frameLen/4), []byte(hex.EncodeToString(random))...)
	for _, body := range [][]byte{nil, []byte("x"), make([]byte, frameLen), make([]byte, frameLen+1), random, mixed} {
		st, _, err := sealState(fuzzKeys, stateIdle, body)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := openState(fuzzKeys, st)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%d bytes: %v", len(body), err)
		}
	}
	st, _, _ := sealState(fuzzKeys, stateIdle, mixed)
	h, _ := parseHeader(st)
	var frames [][]byte
	for at := h.n; at < len(st); {
		m := int(st[at]) | int(st[at+1])<<8 | int(st[at+2])<<16 | int(st[at+3])<<24
		frames = append(frames, st[at:at+4+m])
		at += 4 + m
	}
	if len(frames) < 3 {
		t.Fatalf("%d frames", len(frames))
	}
	join := func(fs ...[]byte) []byte { return append(bytes.Clone(st[:h.n]), bytes.Join(fs, nil)...) }
	for name, b := range map[string][]byte{
		"swapped":   join(append([][]byte{frames[1], frames[0]}, frames[2:]...)...),
		"last cut":  join(frames[:len(frames)-1]...),
		"first cut": join(frames[1:]...),
		"repeated":  join(append(frames, frames[len(frames)-1])...),
	} {
		if _, _, err := openState(fuzzKeys, b); !errors.Is(err, ErrStateInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
