package wasmbin_test

import (
	"testing"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
)

// moduleWithBody is a module of one function, () -> (), with one funcref
// table, whose body (locals and expression) is body.
func moduleWithBody(body []byte) []byte {
	b := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
		0x03, 0x02, 0x01, 0x00, // one function of type 0
		0x04, 0x04, 0x01, 0x70, 0x00, 0x01, // one funcref table, min 1
	}
	code := append([]byte{0x01, byte(len(body))}, body...)
	return append(append(b, 0x0a, byte(len(code))), code...)
}

func TestStateWriter(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"none", []byte{0x00, 0x01, 0x0B}, ""},
		{"table.get only", []byte{0x00, 0x41, 0x00, 0x25, 0x00, 0x1A, 0x0B}, ""},
		{"table.set", []byte{0x00, 0x41, 0x00, 0xD0, 0x70, 0x26, 0x00, 0x0B}, "table.set"},
		{"table.grow", []byte{0x00, 0xD0, 0x70, 0x41, 0x01, 0xFC, 0x0F, 0x00, 0x1A, 0x0B}, "table.grow"},
		{"data.drop", []byte{0x00, 0xFC, 0x09, 0x00, 0x0B}, "data.drop"},
		{"elem.drop", []byte{0x00, 0xFC, 0x0D, 0x00, 0x0B}, "elem.drop"},
	} {
		m, err := wasmbin.Parse(moduleWithBody(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		op, _, err := m.StateWriter()
		if err != nil || op != tc.want {
			t.Errorf("%s: got %q (%v), want %q", tc.name, op, err, tc.want)
		}
	}
	m, err := wasmbin.Parse(moduleWithBody([]byte{0x00, 0xFE, 0x00, 0x0B}))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.StateWriter(); err == nil {
		t.Error("code the decoder cannot read passed as writing no state")
	}
}

// The pinned image writes no table and drops no segment, so its VMs can
// be rewound for reuse (see internal/engine/rewind.go).
func TestPinnedImageWritesNoTable(t *testing.T) {
	m, err := wasmbin.Parse(pinnedImage(t))
	if err != nil {
		t.Fatal(err)
	}
	if op, body, err := m.StateWriter(); err != nil || op != "" {
		t.Fatalf("body %d has %q (%v)", body, op, err)
	}
}
