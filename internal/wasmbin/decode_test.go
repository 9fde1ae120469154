package wasmbin_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
)

// Every function body of the pinned image decodes, and encoding what was
// decoded gives back the same bytes: the decoder reads every opcode and
// immediate the image uses, with nothing left over or misread.
func TestDecodePinnedImageRoundTrip(t *testing.T) {
	m, err := wasmbin.Parse(pinnedImage(t))
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := m.Bodies()
	if err != nil {
		t.Fatal(err)
	}
	var in wasmbin.Instr
	var buf []byte
	n := 0
	ops := map[[2]uint32]int{}
	for i, b := range bodies {
		hdr, err := wasmbin.DecodeLocals(b)
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		code := b[hdr.Code:]
		d := wasmbin.NewDecoder(code)
		buf = buf[:0]
		for d.More() {
			if err := d.Next(&in); err != nil {
				t.Fatalf("body %d: %v", i, err)
			}
			buf = wasmbin.AppendInstr(buf, &in)
			if !bytes.Equal(buf[len(buf)-(in.End-in.Off):], code[in.Off:in.End]) {
				t.Fatalf("body %d at %d: re-encoded % x, was % x", i, in.Off, buf[len(buf)-(in.End-in.Off):], code[in.Off:in.End])
			}
			ops[[2]uint32{uint32(in.Op), in.Sub}]++
			n++
		}
		if !bytes.Equal(buf, code) {
			t.Fatalf("body %d: re-encoding differs", i)
		}
		if len(code) == 0 || code[len(code)-1] != 0x0B {
			t.Fatalf("body %d does not end with end", i)
		}
	}
	t.Logf("%d bodies, %d instructions, %d distinct opcodes", len(bodies), n, len(ops))
}

func TestDecodeUnknownOpcodeFails(t *testing.T) {
	for _, code := range [][]byte{
		{0x06, 0x40, 0x0B, 0x0B},       // try (legacy exceptions)
		{0xFE, 0x00, 0x02, 0x00, 0x0B}, // memory.atomic.notify
		{0xFC, 0x20, 0x0B},             // no such 0xFC instruction
		{0xFD, 0x80, 0x02, 0x0B},       // relaxed SIMD
		{0x41},                         // truncated immediate
	} {
		d := wasmbin.NewDecoder(code)
		var in wasmbin.Instr
		var err error
		for d.More() && err == nil {
			err = d.Next(&in)
		}
		if !errors.Is(err, wasmbin.ErrMalformed) {
			t.Errorf("% x decoded without error (%v)", code, err)
		}
	}
}
