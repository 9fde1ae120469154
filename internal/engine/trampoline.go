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
const trampolineVersion = "2"

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
	u32, name := wasmbin.AppendU32, wasmbin.AppendName
	n := uint32(numShadowed)
	var secs []wasmbin.Section

	b := u32(nil, n) // types
	for _, s := range sigs {
		b = append(b, 0x60)
		b = u32(b, uint32(len(s.Params)))
		b = append(b, s.Params...)
		b = u32(b, uint32(len(s.Results)))
		b = append(b, s.Results...)
	}
	secs = append(secs, wasmbin.Section{ID: wasmbin.SecType, Payload: b})

	b = u32(nil, n+1) // imports: the memory, then the originals
	b = name(b, "env")
	b = name(b, "memory")
	b = append(b, wasmbin.KindMemory, 0x00, 0x00) // no maximum, minimum 0
	for i := range sigs {
		b = name(b, modWASI)
		b = name(b, shadowNames[i])
		b = append(b, wasmbin.KindFunc)
		b = u32(b, uint32(i))
	}
	secs = append(secs, wasmbin.Section{ID: wasmbin.SecImport, Payload: b})

	b = u32(nil, n) // functions
	for i := range sigs {
		b = u32(b, uint32(i))
	}
	secs = append(secs, wasmbin.Section{ID: wasmbin.SecFunction, Payload: b})

	b = u32(nil, n+1) // exports
	b = name(b, "memory")
	b = append(b, wasmbin.KindMemory, 0x00)
	for i := range sigs {
		b = name(b, shadowNames[i])
		b = append(b, wasmbin.KindFunc)
		b = u32(b, n+uint32(i))
	}
	secs = append(secs, wasmbin.Section{ID: wasmbin.SecExport, Payload: b})

	b = u32(nil, n) // code: pass every parameter on
	for i, s := range sigs {
		body := []byte{0x00} // no locals
		for p := range s.Params {
			body = u32(append(body, 0x20), uint32(p)) // local.get p
		}
		body = append(u32(append(body, 0x10), uint32(i)), 0x0b) // call i; end
		b = append(u32(b, uint32(len(body))), body...)
	}
	secs = append(secs, wasmbin.Section{ID: wasmbin.SecCode, Payload: b})
	return (&wasmbin.Module{Sections: secs}).Encode(), nil
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
