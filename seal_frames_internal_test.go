package glovebox

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
)

// TestSealFrames: bodies of many frames, compressible or not, open to
// themselves; moving, dropping or repeating a frame, marking a stored
// frame compressed or the other way round, or dropping the index, is
// refused as invalid.
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
	head := h.n + 4 + int(binary.LittleEndian.Uint32(st[h.n:])) // the header and the index
	var frames [][]byte
	for at := head; at < len(st); {
		m := int(binary.LittleEndian.Uint32(st[at:]) &^ frameStored)
		frames = append(frames, st[at:at+4+m])
		at += 4 + m
	}
	if len(frames) < 3 {
		t.Fatalf("%d frames", len(frames))
	}
	join := func(fs ...[]byte) []byte { return append(bytes.Clone(st[:head]), bytes.Join(fs, nil)...) }
	relabel := func(i int) []byte {
		b := join(frames...)
		at := head
		for _, f := range frames[:i] {
			at += len(f)
		}
		b[at+3] ^= 0x80
		return b
	}
	if frames[0][3]&0x80 != 0 || frames[len(frames)-1][3]&0x80 == 0 {
		t.Fatal("the text frame is stored, or the hex digits are not")
	}
	noIndex := bytes.Clone(st[:h.n])
	for _, f := range frames {
		noIndex = append(noIndex, f...)
	}
	for name, b := range map[string][]byte{
		"compressed relabelled": relabel(0),
		"stored relabelled":     relabel(len(frames) - 1),
		"swapped":               join(append([][]byte{frames[1], frames[0]}, frames[2:]...)...),
		"last cut":              join(frames[:len(frames)-1]...),
		"first cut":             join(frames[1:]...),
		"repeated":              join(append(frames, frames[len(frames)-1])...),
		"index dropped":         noIndex,
	} {
		if _, _, err := openState(fuzzKeys, b); !errors.Is(err, ErrStateInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
