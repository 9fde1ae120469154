package engine

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Cache files are checked in full (a CRC-32C over every byte) the first
// time a process meets them, and a stamp recording the file's identity is
// written beside them (path + ".ok"). A later start whose file still has
// that identity — same device, inode, size, modification and change
// times, to the nanosecond — skips the check. Reading the 84 MB compiled
// module only to checksum it cost 15–25 ms and 84 MB of resident memory
// on every start (measured here with `glovebox eval -e 1+1`).
//
// The check guards against damage (a torn or corrupted file), not against
// an attacker: whoever can write the cache can write the checksum too.
// Every cache file is written to a temporary name and renamed into place,
// so a file that is replaced gets a new inode, and one written in place
// gets new times; either way its stamp no longer matches and the full
// check runs again.

// fullChecks counts full checks, for tests.
var fullChecks atomic.Int64

// identity describes path's inode as a stamp records it.
func identity(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	return statIdentity(&st), nil
}

// fileIdentity is identity for an open file.
func fileIdentity(f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	return statIdentity(&st), nil
}

func statIdentity(st *unix.Stat_t) string {
	return fmt.Sprintf("%d %d %d %d.%09d %d.%09d", st.Dev, st.Ino, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// hasStamp reports whether path's stamp records identity id and extra
// (which names whatever else the file was checked against).
func hasStamp(path, id, extra string) bool {
	b, err := os.ReadFile(path + ".ok")
	return err == nil && string(b) == id+"\n"+extra+"\n"
}

// writeStamp records that path, with identity id, passed its check. It is
// best effort: without a stamp the next start checks again.
func writeStamp(path, id, extra string) {
	if !strings.Contains(extra, "\n") {
		writeAtomic(path+".ok", []byte(id+"\n"+extra+"\n"))
	}
}

// checkOnce runs check on path unless a stamp says it passed before, and
// stamps path when it passes. The identity stamped is the one read before
// the check, so a file changed while it was being checked is checked again
// next time.
func checkOnce(path, extra string, check func() error) error {
	id, err := identity(path)
	if err != nil {
		return err
	}
	if hasStamp(path, id, extra) {
		return nil
	}
	fullChecks.Add(1)
	if err := check(); err != nil {
		return err
	}
	writeStamp(path, id, extra)
	return nil
}
