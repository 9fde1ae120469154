package engine

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// residentPages counts path's pages that are in the page cache.
func residentPages(t *testing.T, path string) int {
	t.Helper()
	b, unmap, err := mapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// The cache files processes map leave no pages behind in the page cache
// when written: large-folio pages made by the write would be mapped whole
// into the next process on first touch and counted as its resident
// memory (dropPageCache).
func TestCacheFilesLeaveNoPageCache(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil && fs.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is tmpfs, whose pages are the file itself")
	}

	// memory.raw, expanded from a memory image.
	mem := make([]byte, 64*65536)
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = byte(i>>12) | 1
	}
	memPath := filepath.Join(dir, "memory.mem")
	if err := writeAtomic(memPath, encodeMemImage(mem)); err != nil {
		t.Fatal(err)
	}
	rawPath := filepath.Join(dir, "memory.raw")
	f, err := openRawImage(memPath, rawPath)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := make([]byte, len(mem))
	g, _ := os.ReadFile(rawPath)
	copy(got, g)
	if string(got) != string(mem) || len(g) != len(mem) {
		t.Fatal("memory.raw does not hold the image")
	}
	// ReadFile brought the pages back: expand again to check the drop.
	os.Remove(rawPath + ".ok")
	os.Remove(rawPath)
	if f, err = openRawImage(memPath, rawPath); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n := residentPages(t, rawPath); n != 0 {
		t.Errorf("memory.raw: %d pages in the page cache after expansion, want 0", n)
	}

	// A compiled module, saved.
	eng, err := wt.NewEngine(wt.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m, err := wt.Compile(eng, []byte("\x00asm\x01\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	modPath := filepath.Join(dir, "module.cwasm")
	if err := saveModule(m, modPath); err != nil {
		t.Fatal(err)
	}
	if n := residentPages(t, modPath); n != 0 {
		t.Errorf("module.cwasm: %d pages in the page cache after saving, want 0", n)
	}
	// (loadModule drops the file again after reading it whole for its
	// checksum, but wasmtime then reads back what it deserialises: all of
	// a module this small, so that drop is not observable here.)
}
