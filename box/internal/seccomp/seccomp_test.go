package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestProgramShape checks the jumps stay inside the program, every path
// ends in a return, and the named calls are each refused.
func TestProgramShape(t *testing.T) {
	p, err := Program()
	if err == ErrUnsupportedArch {
		t.Skip("no syscall table for this architecture")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(p) > 4096 {
		t.Fatalf("%d instructions, over BPF_MAXINSNS", len(p))
	}
	for i, in := range p {
		if in.Code&0x07 == 0x05 && (i+1+int(in.Jt) >= len(p) || i+1+int(in.Jf) >= len(p)) {
			t.Errorf("insn %d jumps out of the program", i)
		}
	}
	if p[len(p)-1].Code != retK {
		t.Errorf("last instruction is not a return")
	}
	// Simulate: each denied number returns EPERM; getpid is allowed.
	for name, nr := range syscalls {
		if got := simulate(p, uint32(nr), 0); got != retErr|uint32(unix.EPERM) {
			t.Errorf("%s: %#x", name, got)
		}
	}
	if got := simulate(p, uint32(unix.SYS_GETPID), 0); got != retAll {
		t.Errorf("getpid: %#x", got)
	}
	if got := simulate(p, uint32(unix.SYS_CLONE), unix.CLONE_NEWUSER); got != retErr|uint32(unix.EPERM) {
		t.Errorf("clone(NEWUSER): %#x", got)
	}
	if got := simulate(p, uint32(unix.SYS_CLONE), unix.CLONE_VM|unix.CLONE_THREAD); got != retAll {
		t.Errorf("clone(thread): %#x", got)
	}
	if got := simulate(p, uint32(unix.SYS_CLONE3), 0); got != retErr|uint32(unix.ENOSYS) {
		t.Errorf("clone3: %#x", got)
	}
}

// simulate runs the filter for a call nr with first argument arg0 on this
// architecture (argument 1 is zero).
func simulate(p []Insn, nr, arg0 uint32) uint32 {
	data := map[uint32]uint32{offNr: nr, offArch: auditArch, offArg0: arg0}
	var a uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		switch in.Code {
		case ldAbs:
			a = data[in.K]
		case jeqK, jgeK, jsetK:
			var ok bool
			switch in.Code {
			case jeqK:
				ok = a == in.K
			case jgeK:
				ok = a >= in.K
			default:
				ok = a&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case retK:
			return in.K
		}
	}
	return 0
}

// TestOCIMatchesFilter: the OCI form refuses both bits in every call the
// filter checks the mode of, and device nodes in mknod and mknodat.
func TestOCIMatchesFilter(t *testing.T) {
	f := OCI()
	if f == nil {
		t.Skip("no syscall table for this architecture")
	}
	bits := map[string]int{}
	for _, r := range f["syscalls"].([]any) {
		r := r.(map[string]any)
		name := r["names"].([]string)[0]
		if r["action"] != "SCMP_ACT_ERRNO" || r["errnoRet"] != uint(unix.EPERM) {
			t.Errorf("%s: %v", name, r)
		}
		for _, a := range r["args"].([]any) {
			a := a.(map[string]any)
			if a["op"] != "SCMP_CMP_MASKED_EQ" {
				t.Errorf("%s: op %v", name, a["op"])
			}
			if v := a["value"].(uint32); v == unix.S_ISUID || v == unix.S_ISGID {
				bits[name] |= int(v)
			}
			if a["value"].(uint32) == unix.S_IFMT {
				bits[name] |= 1
			}
		}
	}
	for _, a := range modeArgs {
		want := unix.S_ISUID | unix.S_ISGID
		if a.name == "mknod" || a.name == "mknodat" {
			want |= 1
		}
		if bits[a.name] != want {
			t.Errorf("%s: refused bits %o, want %o", a.name, bits[a.name], want)
		}
	}
}
