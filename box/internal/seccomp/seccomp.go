// Package seccomp builds the classic-BPF seccomp filter the OS boxes load
// (bubblewrap's --seccomp): it denies, with EPERM, the system calls an
// escape from a namespace sandbox usually goes through, and allows the
// rest. The filter is a deny list on purpose: the boxes run arbitrary
// programs (interpreters, compilers), and the namespaces, the read-only
// root and the limits are the other walls.
package seccomp

import (
	"encoding/binary"
	"errors"
	"slices"

	"golang.org/x/sys/unix"
)

// Denied names the system calls the filter refuses with EPERM, besides
// clone with a namespace flag (EPERM), clone3 (ENOSYS, so the C library
// falls back to clone, whose flags the filter can read), the TIOCSTI
// ioctl (EPERM: typing into the terminal of the process outside),
// openat2 (ENOSYS, so the C library falls back to openat, whose mode the
// filter can read), every call that would set S_ISUID or S_ISGID on a file
// (EPERM; see modeArgs) and, on x86-64, every x32 system call.
var Denied = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "quotactl",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "syslog",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"iopl", "ioperm", // x86 only
}

// ErrUnsupportedArch: no syscall table for this architecture.
var ErrUnsupportedArch = errors.New("seccomp: no filter for this architecture")

const (
	ldAbs   = 0x20 // BPF_LD|BPF_W|BPF_ABS
	jeqK    = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
	jgeK    = 0x35 // BPF_JMP|BPF_JGE|BPF_K
	jsetK   = 0x45 // BPF_JMP|BPF_JSET|BPF_K
	retK    = 0x06 // BPF_RET|BPF_K
	retAll  = 0x7fff0000
	retKill = 0x80000000
	retErr  = 0x00050000

	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24

	nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	x32Bit = 0x40000000

	setid   = unix.S_ISUID | unix.S_ISGID
	creates = unix.O_CREAT | 0o20000000 // O_CREAT, __O_TMPFILE
)

// modeArg locates a system call's file mode argument, and, for the open
// family, the flags argument that says whether the mode is used (-1: the
// mode is always used); name is the call's name.
type modeArg struct {
	mode, flags int
	name        string
}

// modeArgs are the calls that give a file a mode. The guest's uid inside
// the user namespace maps to the uid that runs the box (root, for a
// service), so a setuid file made in a writable mount would be a setuid
// program of that user on the host: the filter refuses S_ISUID and
// S_ISGID in these modes. (mkdir ignores both bits; openat2's mode is in a
// struct the filter cannot read, so openat2 is refused outright.)
func argOff(i int) uint32 { return uint32(offArg0 + 8*i) }

// Insn is one sock_filter instruction.
type Insn struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// Program returns the filter's instructions for this architecture.
func Program() ([]Insn, error) {
	if auditArch == 0 {
		return nil, ErrUnsupportedArch
	}
	p := []Insn{
		{ldAbs, 0, 0, offArch},
		{jeqK, 1, 0, auditArch},
		{retK, 0, 0, retKill}, // another ABI's numbers mean other calls
		{ldAbs, 0, 0, offNr},
	}
	if auditArch == unix.AUDIT_ARCH_X86_64 {
		p = append(p, Insn{jgeK, 0, 1, x32Bit}, Insn{retK, 0, 0, retErr | uint32(unix.EPERM)})
	}
	for _, name := range Denied {
		nr, ok := syscalls[name]
		if !ok {
			continue
		}
		p = append(p, Insn{jeqK, 0, 1, uint32(nr)}, Insn{retK, 0, 0, retErr | uint32(unix.EPERM)})
	}
	for _, nr := range sortedModeCalls() {
		a := modeArgs[nr]
		if a.flags < 0 {
			p = append(p,
				Insn{jeqK, 0, 4, uint32(nr)},
				Insn{ldAbs, 0, 0, argOff(a.mode)},
				Insn{jsetK, 0, 1, setid},
				Insn{retK, 0, 0, retErr | uint32(unix.EPERM)},
				Insn{retK, 0, 0, retAll})
			continue
		}
		p = append(p,
			Insn{jeqK, 0, 6, uint32(nr)},
			Insn{ldAbs, 0, 0, argOff(a.flags)},
			Insn{jsetK, 0, 3, creates},
			Insn{ldAbs, 0, 0, argOff(a.mode)},
			Insn{jsetK, 0, 1, setid},
			Insn{retK, 0, 0, retErr | uint32(unix.EPERM)},
			Insn{retK, 0, 0, retAll})
	}
	p = append(p,
		Insn{jeqK, 0, 1, uint32(unix.SYS_OPENAT2)}, Insn{retK, 0, 0, retErr | uint32(unix.ENOSYS)},
		Insn{jeqK, 0, 1, uint32(unix.SYS_CLONE3)}, Insn{retK, 0, 0, retErr | uint32(unix.ENOSYS)},
		// clone: refuse namespace flags (arg 0, low word).
		Insn{jeqK, 0, 4, uint32(unix.SYS_CLONE)},
		Insn{ldAbs, 0, 0, offArg0},
		Insn{jsetK, 0, 1, nsFlags},
		Insn{retK, 0, 0, retErr | uint32(unix.EPERM)},
		Insn{retK, 0, 0, retAll},
		// ioctl: refuse TIOCSTI (arg 1, low word).
		Insn{jeqK, 0, 4, uint32(unix.SYS_IOCTL)},
		Insn{ldAbs, 0, 0, offArg1},
		Insn{jeqK, 0, 1, unix.TIOCSTI},
		Insn{retK, 0, 0, retErr | uint32(unix.EPERM)},
		Insn{retK, 0, 0, retAll},
		Insn{retK, 0, 0, retAll},
	)
	return p, nil
}

func sortedModeCalls() []int {
	nrs := make([]int, 0, len(modeArgs))
	for nr := range modeArgs {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	return nrs
}

// OCI is the filter's refusal of S_ISUID and S_ISGID as an OCI runtime
// spec's linux.seccomp object, for a runtime that applies such a filter
// inside its own sandbox (gVisor's runsc with --oci-seccomp): every other
// call is allowed; the calls of modeArgs fail with EPERM when their mode
// has either bit (open and openat only when they create: O_CREAT or
// O_TMPFILE), and mknod and mknodat when they would make a character or
// block device (which a namespace sandbox's kernel refuses by itself:
// CAP_MKNOD counts only in the host's user namespace; a user-space kernel
// has its own devices to reach). Its shape: {"defaultAction": "SCMP_ACT_ALLOW", "syscalls":
// [{"names": [NAME], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args":
// [{"index": I, "value": BIT, "valueTwo": BIT, "op":
// "SCMP_CMP_MASKED_EQ"}, …]}, …]}, one rule per call, bit and creating
// flag (a rule's args must all match; any rule refuses). Nil on an
// architecture without a table (ErrUnsupportedArch's).
func OCI() map[string]any {
	if auditArch == 0 {
		return nil
	}
	has := func(i int, bit uint32) map[string]any {
		return map[string]any{"index": i, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}
	}
	var rules []any
	rule := func(name string, args ...any) {
		rules = append(rules, map[string]any{"names": []string{name}, "action": "SCMP_ACT_ERRNO", "errnoRet": uint(unix.EPERM), "args": args})
	}
	for _, nr := range sortedModeCalls() {
		a := modeArgs[nr]
		if a.name == "mknod" || a.name == "mknodat" {
			for _, kind := range []uint32{unix.S_IFCHR, unix.S_IFBLK} {
				rule(a.name, map[string]any{"index": a.mode, "value": uint32(unix.S_IFMT), "valueTwo": kind, "op": "SCMP_CMP_MASKED_EQ"})
			}
		}
		for _, bit := range []uint32{unix.S_ISUID, unix.S_ISGID} {
			if a.flags < 0 {
				rule(a.name, has(a.mode, bit))
				continue
			}
			for _, f := range []uint32{unix.O_CREAT, 0o20000000} {
				rule(a.name, has(a.flags, f), has(a.mode, bit))
			}
		}
	}
	return map[string]any{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules}
}

// Bytes is Program in the kernel's struct sock_filter layout (8 bytes per
// instruction, host byte order), as bubblewrap's --seccomp reads it.
func Bytes() ([]byte, error) {
	p, err := Program()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(p))
	for _, in := range p {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b, nil
}
