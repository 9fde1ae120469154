package engine

import (
	"fmt"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// wasmtime's WASI functions find the caller's memory through the calling
// instance's "memory" export, so a host function cannot call them
// directly. The trampoline is a small module, instantiated in each VM's
// store, that imports the guest's memory and re-exports it, imports the
// original WASI functions the guard shadows, and exports one function
// each that calls the original: a shadowing host function calls those.

// trampolineVersion names the trampoline's layout (the shadowed imports
// and their order) in its cache file name; change it with shadowNames.
const trampolineVersion = "1"

// trampolineModule builds the trampoline for the shadowed imports, with
// the signatures the guest image declares for them.
func trampolineModule(m *wasmbin.Module) ([]byte, error) {
	imps, err := m.Imports()
	if err != nil {
		return nil, err
	}
	types, err := m.Types()
	if err != nil {
		return nil, err
	}
	var sigs [numShadowed]*wasmbin.FuncType
	for _, im := range imps {
		if im.Module != modWASI || im.Kind != wasmbin.KindFunc {
			continue
		}
		for i, n := range shadowNames {
			if n == im.Name && int(im.TypeIndex) < len(types) {
				sigs[i] = &types[im.TypeIndex]
			}
		}
	}
	for i, s := range sigs {
		if s == nil {
			return nil, fmt.Errorf("the guest image does not import %s", shadowNames[i])
		}
	}
	var out []byte
	out = append(out, 0, 'a', 's', 'm', 1, 0, 0, 0)
	section := func(id byte, body []byte) {
		out = append(out, id)
		out = uleb(out, uint64(len(body)))
		out = append(out, body...)
	}
	name := func(b []byte, s string) []byte { return append(uleb(b, uint64(len(s))), s...) }
	n := uint64(numShadowed)

	var b []byte // types
	b = uleb(b, n)
	for _, s := range sigs {
		b = append(b, 0x60)
		b = uleb(b, uint64(len(s.Params)))
		b = append(b, s.Params...)
		b = uleb(b, uint64(len(s.Results)))
		b = append(b, s.Results...)
	}
	section(1, b)

	b = uleb(nil, n+1) // imports: the memory, then the originals
	b = name(b, "env")
	b = name(b, "memory")
	b = append(b, 0x02, 0x00, 0x00) // memory, no maximum, minimum 0
	for i := range sigs {
		b = name(b, modWASI)
		b = name(b, shadowNames[i])
		b = append(b, 0x00)
		b = uleb(b, uint64(i))
	}
	section(2, b)

	b = uleb(nil, n) // functions
	for i := range sigs {
		b = uleb(b, uint64(i))
	}
	section(3, b)

	b = uleb(nil, n+1) // exports
	b = name(b, "memory")
	b = append(b, 0x02, 0x00)
	for i := range sigs {
		b = name(b, shadowNames[i])
		b = append(b, 0x00)
		b = uleb(b, n+uint64(i))
	}
	section(7, b)

	b = uleb(nil, n) // code: pass every parameter on
	for i, s := range sigs {
		var body []byte
		body = append(body, 0x00) // no locals
		for p := range s.Params {
			body = append(body, 0x20)
			body = uleb(body, uint64(p))
		}
		body = append(body, 0x10)
		body = uleb(body, uint64(i))
		body = append(body, 0x0b)
		b = uleb(b, uint64(len(body)))
		b = append(b, body...)
	}
	section(10, b)
	return out, nil
}

func uleb(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// bindTrampoline instantiates the trampoline in v's store and keeps its
// exports as the originals of the shadowed calls.
func (v *VM) bindTrampoline() error {
	funcs := make([]wt.Func, numShadowed)
	for i, n := range shadowNames {
		f, ok := v.e.wasi.Func(v.store, modWASI, n)
		if !ok {
			return fmt.Errorf("wasmtime lacks %s", n)
		}
		funcs[i] = f
	}
	inst, err := wt.Instantiate(v.store, v.e.tramp, &v.mem, funcs)
	if err != nil {
		return fmt.Errorf("instantiating the WASI trampoline: %w", err)
	}
	c := v.store.Context()
	for i, n := range shadowNames {
		f, ok := inst.Func(c, n)
		if !ok {
			return fmt.Errorf("the WASI trampoline lacks %s", n)
		}
		v.fs.orig[i] = f
	}
	return nil
}
