package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
)

// A memory image file holds a linear memory compactly: only its non-zero
// byte ranges, with a CRC-32C over everything so a damaged cache entry is
// detected and rebuilt rather than run.
//
//	magic   8 bytes  "GBMEM01\n"
//	size    u64      bytes of linear memory described
//	n       u32      number of ranges
//	ranges  n × (u64 offset, u64 length), ascending, non-overlapping
//	crc     u32      CRC-32C of all bytes before it and all data after it
//	data    the ranges' bytes, concatenated
var memMagic = []byte("GBMEM01\n")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a cache entry that failed validation.
var errCorrupt = errors.New("corrupt cache entry")

// encodeMemImage returns the file form of mem.
func encodeMemImage(mem []byte) []byte {
	ranges := wasmbin.NonZeroRanges(mem, 4096)
	var hdr bytes.Buffer
	hdr.Write(memMagic)
	binary.Write(&hdr, binary.LittleEndian, uint64(len(mem)))
	binary.Write(&hdr, binary.LittleEndian, uint32(len(ranges)))
	total := 0
	for _, r := range ranges {
		binary.Write(&hdr, binary.LittleEndian, uint64(r[0]))
		binary.Write(&hdr, binary.LittleEndian, uint64(r[1]-r[0]))
		total += r[1] - r[0]
	}
	crc := crc32.Update(0, castagnoli, hdr.Bytes())
	data := make([]byte, 0, total)
	for _, r := range ranges {
		data = append(data, mem[r[0]:r[1]]...)
	}
	crc = crc32.Update(crc, castagnoli, data)
	out := hdr.Bytes()
	out = binary.LittleEndian.AppendUint32(out, crc)
	return append(out, data...)
}

type memRange struct{ off, len uint64 }

// decodeMemImage validates b and returns the memory size, the ranges and
// the concatenated range data.
func decodeMemImage(b []byte) (uint64, []memRange, []byte, error) {
	if len(b) < len(memMagic)+12 || !bytes.Equal(b[:len(memMagic)], memMagic) {
		return 0, nil, nil, fmt.Errorf("%w: not a memory image", errCorrupt)
	}
	p := len(memMagic)
	size := binary.LittleEndian.Uint64(b[p:])
	n := binary.LittleEndian.Uint32(b[p+8:])
	p += 12
	if uint64(n) > uint64(len(b)-p)/16 {
		return 0, nil, nil, fmt.Errorf("%w: truncated range table", errCorrupt)
	}
	ranges := make([]memRange, n)
	var total, end uint64
	for i := range ranges {
		r := memRange{binary.LittleEndian.Uint64(b[p:]), binary.LittleEndian.Uint64(b[p+8:])}
		p += 16
		if r.off < end || r.len > size || r.off > size-r.len {
			return 0, nil, nil, fmt.Errorf("%w: bad range %d", errCorrupt, i)
		}
		end = r.off + r.len
		total += r.len
		ranges[i] = r
	}
	if len(b)-p < 4 || uint64(len(b)-p-4) != total {
		return 0, nil, nil, fmt.Errorf("%w: data length", errCorrupt)
	}
	want := binary.LittleEndian.Uint32(b[p:])
	crc := crc32.Update(0, castagnoli, b[:p])
	data := b[p+4:]
	if crc32.Update(crc, castagnoli, data) != want {
		return 0, nil, nil, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	return size, ranges, data, nil
}

// loadMemImage reads a memory image file into a sealed memfd: a private
// file that lives as long as this process, cannot shrink or change, and
// that every instance maps copy-on-write.
func loadMemImage(path string) (*os.File, []memRange, error) {
	b, unmap, err := mapFile(path)
	if err != nil {
		return nil, nil, err
	}
	defer unmap()
	size, ranges, data, err := decodeMemImage(b)
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.MemfdCreate("glovebox-memory-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "glovebox-memory-image")
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, nil, err
	}
	for _, r := range ranges {
		if _, err := f.WriteAt(data[:r.len], int64(r.off)); err != nil {
			f.Close()
			return nil, nil, err
		}
		data = data[r.len:]
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sealing memory image: %w", err)
	}
	return f, ranges, nil
}

// openRawImage returns the memory image at memPath expanded into rawPath:
// a sparse file of the memory's size, each range at its offset, zeros as
// holes. VMs map it directly (private, copy-on-write), so a start neither
// checks nor copies the image's bytes; the expansion is made, and checked
// against memPath's checksum, once, and stamped with memPath's identity,
// so a memPath rebuilt or changed is expanded again.
//
// Like every cache file rawPath is only ever replaced by a rename, never
// written in place, so the inode a process has mapped never changes.
func openRawImage(memPath, rawPath string) (*os.File, error) {
	memID, err := identity(memPath)
	if err != nil {
		return nil, err
	}
	extra := "expanded from " + memID
	if f, err := os.Open(rawPath); err == nil {
		if id, err := fileIdentity(f); err == nil && hasStamp(rawPath, id, extra) {
			return f, nil
		}
		f.Close()
	}
	fullChecks.Add(1)
	b, unmap, err := mapFile(memPath)
	if err != nil {
		return nil, err
	}
	defer unmap()
	size, ranges, data, err := decodeMemImage(b)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(rawPath), filepath.Base(rawPath)+".tmp-*")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("glovebox: expanding the memory image: %w", err)
	}
	if err := tmp.Truncate(int64(size)); err != nil {
		return fail(err)
	}
	for _, r := range ranges {
		if _, err := tmp.WriteAt(data[:r.len], int64(r.off)); err != nil {
			return fail(err)
		}
		data = data[r.len:]
	}
	dropPageCache(tmp) // see dropPageCache: written whole, mapped in part
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), rawPath); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("glovebox: expanding the memory image: %w", err)
	}
	f, err := os.Open(rawPath)
	if err != nil {
		return nil, err
	}
	if id, err := fileIdentity(f); err == nil {
		writeStamp(rawPath, id, extra)
	}
	return f, nil
}
