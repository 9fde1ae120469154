package glovebox

import (
	"fmt"
	"time"
)

// Limits bound one eval. Every zero field takes its default; negative
// values are invalid. A [Runtime] applies its Limits to every eval;
// [Runtime.WithLimits] derives a view that overrides some of them.
type Limits struct {
	// Timeout is the wall-clock limit, tool calls and sleeps included.
	// It is enforced by epoch interruption, which also stops long C
	// builtins such as a backtracking regular expression, with a
	// granularity of 10 ms. An eval with a Fuel budget on a Runtime made
	// without one first waits, at most Timeout, for the metered copy of
	// the guest to be opened (compiled, on the machine's first use; see
	// Fuel); past Timeout it ends with StatusTimeout, not having run, and
	// its error says what it waited for. Once that copy is open, the eval
	// runs with its whole Timeout. Zero means DefaultTimeout.
	Timeout time.Duration

	// Fuel is a deterministic CPU budget in fuel units. glovebox meters
	// the guest itself: at every loop iteration and every entry to a
	// function that loops or calls, it charges the WebAssembly
	// instructions of the code that runs from there to the next such
	// point (counted when the image is rewritten, at most 64 a point), so
	// a unit is about one wasm instruction, and the same program on the
	// same image uses the same fuel every run (unless what it does depends
	// on random numbers: rand(10) rejects and redraws some values, so its
	// count varies by a few hundred units). A 1M-iteration Ruby while
	// loop takes about 5.1e8 and the eval driver itself about 1.8e5 for a
	// trivial program; on a set of small programs the count is 0.8 to
	// 1.15 times the wasmtime fuel units earlier versions counted, so
	// budgets set then keep their meaning. When the budget runs out the
	// eval ends with StatusFuelExhausted and Result.FuelUsed equals
	// Fuel. An eval with a budget runs that metered copy of the guest,
	// which costs time of its own (about +5% on the while loop; glovebox
	// bench prints it); the first such eval on a machine compiles it,
	// 20 s to a few minutes on 2 cores (logged at Warn level), then it is
	// cached; `glovebox setup` compiles it ahead of time. Zero (the
	// default) means no fuel budget: the guest runs unmetered, counts no
	// fuel (Result.FuelUsed is 0), and Timeout bounds the work.
	Fuel uint64

	// Memory caps the guest's linear memory in bytes. The booted guest
	// already occupies about 370 MiB of address space (Ruby reserves
	// 256 MiB at start-up that it never touches, and 32 MiB of it is free
	// heap the guest's data uses before memory grows; untouched pages use
	// no host memory), so values below Runtime.MemoryFloor are rejected.
	// The most is 4 GiB, the address space of a wasm32 guest; larger
	// values are rejected. Running out of memory ends the eval with
	// StatusMemoryLimit also when the address space runs out before the
	// limit (limits above 2 GiB, where one allocation can cross 4 GiB).
	// Zero means DefaultMemory.
	Memory int64

	// Stdout and Stderr are the bytes of each stream kept; output past
	// them is dropped and the result flagged and marked. Zero means
	// DefaultStdout and DefaultStderr.
	Stdout int
	Stderr int

	// Value caps the encoded size, in bytes, of the value of the last
	// expression. Zero means DefaultValue.
	Value int

	// ToolCalls is the most tool calls one eval may make. Zero means
	// DefaultToolCalls.
	ToolCalls int

	// ToolTime is the most wall-clock time one eval may spend inside tool
	// calls in total; a tool's context is cancelled when it runs out. A
	// tool that ignores its context is only cut off at Timeout, when the
	// eval abandons its VM. Zero means Timeout (no separate budget).
	ToolTime time.Duration

	// ToolPayload is the most bytes one tool call may carry in each
	// direction: the encoded arguments from the guest and the encoded
	// result back. A call over it fails alone: the guest gets
	// Glovebox::ToolPayloadError ([PayloadErrorClass]), which it may
	// rescue, the eval goes on, and the transcript entry's Outcome is
	// OutcomeOversized. Zero means DefaultToolPayload.
	ToolPayload int

	// FileWrite is a quota, in bytes, on the disk space in use by the
	// files one eval wrote, in the scratch directory and writable mounts
	// together, counted as a file system counts it (st_blocks): a sparse
	// file counts for the blocks it allocates, not for its size, and
	// deleting a file (once nothing holds it open), truncating it or
	// rewriting it gives its space back, so a program may write and
	// remove temporary files for as long as it likes. Each write, and
	// each truncate that could allocate, is bounded before it runs by
	// what it can allocate (the blocks it touches that the file does not
	// hold yet, and one block of file-system metadata), and fails with
	// Errno::EDQUOT when that does not fit, so the space in use never
	// passes the quota (by more than a file system's own speculative
	// preallocation). Shrinking or deleting a file the eval did not
	// write frees nothing for it. Zero means DefaultFileWrite.
	FileWrite int64

	// FileCreates is a quota on the names (files, directories, symbolic
	// and hard links) one eval made that still exist; removing one, or
	// renaming another over it, gives it back. Past it, creation fails
	// with Errno::EDQUOT. Zero means DefaultFileCreates.
	//
	// Both file quotas are per eval: a session's scratch directory is
	// wiped after each eval, and what earlier evals left in a mount
	// belongs to the host from then on.
	FileCreates int

	// Stdin is the most bytes of standard input one eval may be given
	// (see WithStdin); a longer input fails Eval with ErrInvalidInput.
	// Zero means DefaultStdin.
	Stdin int
	// ApprovalTimeout is the longest one tool call waits for a person's
	// decision (see [Hooks].Approver); with no decision by then the call
	// is denied. The wait counts against neither Timeout nor ToolTime.
	// Zero means DefaultApprovalTimeout.
	ApprovalTimeout time.Duration
}

// Defaults for zero [Limits] fields. The output limits follow the seed
// project security_box (1 MiB stdout, 64 KiB stderr); the tool budgets
// follow its host RPC limits (1,000 calls, 1 MiB per response).
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMemory      = 512 << 20
	DefaultStdout      = 1 << 20
	DefaultStderr      = 64 << 10
	DefaultValue       = 1 << 20
	DefaultToolCalls   = 1000
	DefaultToolPayload = 1 << 20
	// DefaultFileWrite and DefaultFileCreates bound file floods: 64 MiB
	// in use and 1,000 existing entries are far above what an analysis
	// script keeps and far below what would trouble the host's disk.
	DefaultFileWrite   = 64 << 20
	DefaultFileCreates = 1000
	// DefaultStdin matches DefaultStdout: the input is held in the
	// guest's memory, decoded, as a String.
	DefaultStdin = 1 << 20
	// DefaultApprovalTimeout, 5 minutes, is long enough for a person to
	// read a request and answer, short enough that a forgotten prompt
	// does not hold a VM for good.
	DefaultApprovalTimeout = 5 * time.Minute
)

// withDefaults validates l and fills in its zero fields.
func (l Limits) withDefaults(floor int64) (Limits, error) {
	bad := func(field string, v any) (Limits, error) {
		return Limits{}, fmt.Errorf("%w: %s is %v; it must not be negative", ErrInvalidLimits, field, v)
	}
	switch {
	case l.Timeout < 0:
		return bad("Timeout", l.Timeout)
	case l.Memory < 0:
		return bad("Memory", l.Memory)
	case l.Stdout < 0:
		return bad("Stdout", l.Stdout)
	case l.Stderr < 0:
		return bad("Stderr", l.Stderr)
	case l.Value < 0:
		return bad("Value", l.Value)
	case l.ToolCalls < 0:
		return bad("ToolCalls", l.ToolCalls)
	case l.ToolTime < 0:
		return bad("ToolTime", l.ToolTime)
	case l.ToolPayload < 0:
		return bad("ToolPayload", l.ToolPayload)
	case l.FileWrite < 0:
		return bad("FileWrite", l.FileWrite)
	case l.FileCreates < 0:
		return bad("FileCreates", l.FileCreates)
	case l.Stdin < 0:
		return bad("Stdin", l.Stdin)
	case l.ApprovalTimeout < 0:
		return bad("ApprovalTimeout", l.ApprovalTimeout)
	}
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.Memory == 0 {
		l.Memory = DefaultMemory
	}
	def(&l.Stdout, DefaultStdout)
	def(&l.Stderr, DefaultStderr)
	def(&l.Value, DefaultValue)
	def(&l.ToolCalls, DefaultToolCalls)
	def(&l.ToolPayload, DefaultToolPayload)
	def(&l.FileCreates, DefaultFileCreates)
	def(&l.Stdin, DefaultStdin)
	if l.FileWrite == 0 {
		l.FileWrite = DefaultFileWrite
	}
	if l.ToolTime == 0 {
		l.ToolTime = l.Timeout
	}
	if l.ApprovalTimeout == 0 {
		l.ApprovalTimeout = DefaultApprovalTimeout
	}
	if floor > 0 && l.Memory < floor {
		return Limits{}, fmt.Errorf("%w: Memory (--memory, limits.memory) is %d bytes (%s), below the %s the booted guest occupies; "+
			"set at least %dMiB: most of that is address space Ruby reserves and never touches, so it costs no host memory",
			ErrInvalidLimits, l.Memory, mib(l.Memory), mib(floor), (floor+(1<<20)-1)>>20)
	}
	if l.Memory > 4<<30 {
		return Limits{}, fmt.Errorf("%w: Memory is %s, above the 4 GiB a 32-bit guest can address", ErrInvalidLimits, mib(l.Memory))
	}
	return l, nil
}

func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// over returns l with its zero fields taken from base.
func (l Limits) over(base Limits) Limits {
	pick := func(p *int, b int) {
		if *p == 0 {
			*p = b
		}
	}
	if l.Timeout == 0 {
		l.Timeout = base.Timeout
	}
	if l.Fuel == 0 {
		l.Fuel = base.Fuel
	}
	if l.Memory == 0 {
		l.Memory = base.Memory
	}
	if l.ToolTime == 0 {
		l.ToolTime = base.ToolTime
	}
	if l.FileWrite == 0 {
		l.FileWrite = base.FileWrite
	}
	if l.ApprovalTimeout == 0 {
		l.ApprovalTimeout = base.ApprovalTimeout
	}
	pick(&l.Stdout, base.Stdout)
	pick(&l.Stderr, base.Stderr)
	pick(&l.Value, base.Value)
	pick(&l.ToolCalls, base.ToolCalls)
	pick(&l.ToolPayload, base.ToolPayload)
	pick(&l.FileCreates, base.FileCreates)
	pick(&l.Stdin, base.Stdin)
	return l
}
