package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Tests of write tracking (wt.SetWriteTracking; "Write tracking" in
// internal/wt/memory_linux.c): a rewind restores only the pages written
// since the checkpoint, found through userfaultfd write-protection, and
// must still put back every byte, whoever wrote it and however the page
// got there. Each test compares the whole linear memory with the
// checkpoint after every rewind.

// Bits of a /proc/self/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61
	pmUffdWP  = 1 << 57 // write-protected through a userfaultfd
)

// pagemap reads v's /proc/self/pagemap entries, one per 4 KiB page of
// its image range.
func pagemap(t *testing.T, v *VM) []uint64 {
	t.Helper()
	base, n := v.inst.MemoryRange()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("this host does not let the process read its pagemap: %v", err)
	}
	defer f.Close()
	buf := make([]byte, n/4096*8)
	if _, err := f.ReadAt(buf, int64(base/4096*8)); err != nil {
		t.Skipf("reading /proc/self/pagemap: %v", err)
	}
	out := make([]uint64, n/4096)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return out
}

// pagesWhere lists the pages of v whose pagemap entry has every bit of
// set and none of clear.
func pagesWhere(t *testing.T, v *VM, set, clear uint64) []int {
	var out []int
	for p, e := range pagemap(t, v) {
		if e&set == set && e&clear == 0 {
			out = append(out, p)
		}
	}
	return out
}

// requireTracking skips a test of tracking itself where the kernel or
// the host does not allow it (the fallback is tested on its own).
func requireTracking(t *testing.T) {
	t.Helper()
	if !wt.WriteTracking() {
		t.Skip("write tracking is unavailable here (Linux 6.7+ with userfaultfd allowed); rewinds restore every copied page")
	}
}

// rewinder runs evals in one checkpointed VM and checks, after each
// rewind, that its memory and globals are the checkpoint's.
type rewinder struct {
	t           *testing.T
	v           *VM
	want        []byte
	wantGlobals []uint64
	tools       []string
	call        CallFunc
	lim         Limits
}

func newRewinder(t *testing.T, tools []string) *rewinder {
	v, want, globals := checkpointedVM(t, tools)
	lim := testLimits
	lim.FS = FSLimits{Write: 64 << 20, Creates: 100}
	call := func(ctx context.Context, c *Call) ([]byte, error) { return Answer(nil, c.Args[0], 8) }
	return &rewinder{t: t, v: v, want: want, wantGlobals: globals, tools: tools, call: call, lim: lim}
}

func (r *rewinder) mem() []byte { return r.v.mem.Data(r.v.store.Context()) }

func (r *rewinder) run(code string) {
	r.t.Helper()
	out := r.v.run(context.Background(), &Request{Code: code, Limits: r.lim, Tools: r.tools, Call: r.call})
	if out.Trapped || (out.Status != StatusOK && out.Status != StatusError) {
		r.t.Fatalf("%q: %s %+v", code, out.Status, out.Error)
	}
}

// rewind rewinds the VM, checks it against the checkpoint, renews it,
// and returns the pages the rewind restored.
func (r *rewinder) rewind(what string) uint64 {
	r.t.Helper()
	before := testEngine.MemoryStats().Restored
	if err := r.v.rewind(); err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
	restored := testEngine.MemoryStats().Restored - before
	got := r.mem()
	if len(got) != len(r.want) {
		r.t.Fatalf("%s: memory is %d bytes, want %d", what, len(got), len(r.want))
	}
	if n, _ := diffPages(got, r.want, 0); n > 0 {
		r.t.Fatalf("%s: %d pages differ from the checkpoint after the rewind", what, n)
	}
	for j, g := range snapGlobals(r.t, r.v) {
		if g != r.wantGlobals[j] {
			r.t.Fatalf("%s: global %d is %d, want %d", what, j, g, r.wantGlobals[j])
		}
	}
	if err := r.v.renew(); err != nil {
		r.t.Fatal(err)
	}
	return restored
}

// TestTrackedRewindRestoresFewerPages: with tracking, a VM's rewinds
// after its first (which restores every copied page and arms tracking)
// are tracked, and one after 1+1 restores what 1+1 writes, not every
// page the VM's memory has copied since it was mapped.
func TestTrackedRewindRestoresFewerPages(t *testing.T) {
	requireTracking(t)
	r := newRewinder(t, nil)
	tr0 := testEngine.MemoryStats().Tracked
	r.run(`$a = "x" * 4_000_000; 1`) // copies a thousand pages more
	r.rewind("after a big eval")
	var n uint64
	for i := range 12 { // the big eval's pages stay hot for a few rewinds
		r.run("1+1")
		n = r.rewind(fmt.Sprintf("1+1 #%d", i))
	}
	copied := len(pagesWhere(t, r.v, pmPresent, pmFile))
	t.Logf("1+1 rewound by restoring %d pages; the memory holds %d copied pages", n, copied)
	if n == 0 || n*4 > uint64(copied) {
		t.Errorf("a rewind after 1+1 restored %d pages of the %d copied", n, copied)
	}
	if d := testEngine.MemoryStats().Tracked - tr0; d < 12 {
		t.Errorf("%d of the 12 rewinds after the first were tracked", d)
	}
}

// TestTrackedRewindAfterHostAndKernelWrites: pages written between an
// eval and its rewind by the kernel on the process's behalf (a read()
// from a pipe and a pread() from a file copy into the page), through
// get_user_pages (process_vm_writev, a write to /proc/self/mem), by
// another thread, and by plain host code are restored, whether the page
// was write-protected (a copy the VM made before its checkpoint) or the
// image file's own. The write-protected page loses its protection — the
// kernel saw the write — and the rewind puts its bytes back.
func TestTrackedRewindAfterHostAndKernelWrites(t *testing.T) {
	requireTracking(t)
	r := newRewinder(t, nil)
	for range 2 {
		r.run("1+1")
		r.rewind("1+1")
	}
	protected := pagesWhere(t, r.v, pmPresent|pmUffdWP, pmFile)
	image := pagesWhere(t, r.v, pmPresent|pmFile, 0)
	if len(protected) < 8 || len(image) < 8 {
		t.Fatalf("%d write-protected pages and %d image pages present: nothing to aim at", len(protected), len(image))
	}
	data := []byte(strings.Repeat("written behind the guest's back ", 16))
	base, _ := r.v.inst.MemoryRange()
	writers := []struct {
		name  string
		write func(off int) error
	}{
		{"read() from a pipe", func(off int) error {
			pr, pw, err := os.Pipe()
			if err != nil {
				return err
			}
			defer pr.Close()
			defer pw.Close()
			if _, err := pw.Write(data); err != nil {
				return err
			}
			_, err = unix.Read(int(pr.Fd()), r.mem()[off:off+len(data)])
			return err
		}},
		{"pread() from a file", func(off int) error {
			f, err := os.CreateTemp(t.TempDir(), "src")
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.Write(data); err != nil {
				return err
			}
			_, err = unix.Pread(int(f.Fd()), r.mem()[off:off+len(data)], 0)
			return err
		}},
		{"process_vm_writev", func(off int) error {
			local := []unix.Iovec{{Base: &data[0]}}
			local[0].SetLen(len(data))
			remote := []unix.RemoteIovec{{Base: base + uintptr(off), Len: len(data)}}
			_, err := unix.ProcessVMWritev(os.Getpid(), local, remote, 0)
			return err
		}},
		{"/proc/self/mem", func(off int) error {
			f, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(data, int64(base)+int64(off))
			return err
		}},
		{"another thread", func(off int) error {
			runtime.LockOSThread() // so that the goroutine below cannot run on this thread
			defer runtime.UnlockOSThread()
			mine := unix.Gettid()
			done := make(chan error)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if unix.Gettid() == mine {
					done <- fmt.Errorf("the goroutine runs on the rewinding thread")
					return
				}
				copy(r.mem()[off:], data)
				done <- nil
			}()
			return <-done
		}},
		{"host code", func(off int) error { copy(r.mem()[off:], data); return nil }},
	}
	for i, w := range writers {
		r.run("1+1")
		p, q := protected[(i*7)%len(protected)], image[(i*13)%len(image)]
		if e := pagemap(t, r.v)[p]; e&pmUffdWP == 0 {
			t.Fatalf("%s: page %d is no longer write-protected before the write", w.name, p)
		}
		for _, off := range []int{p*4096 + 100, q*4096 + 300} {
			if err := w.write(off); err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			if got := r.mem()[off : off+len(data)]; string(got) != string(data) {
				t.Fatalf("%s: the write did not land", w.name)
			}
		}
		pm := pagemap(t, r.v)
		if pm[p]&pmUffdWP != 0 || pm[q]&pmFile != 0 {
			t.Fatalf("%s: after the write page %d is still write-protected (%x) or page %d still the image's (%x)", w.name, p, pm[p], q, pm[q])
		}
		r.rewind(w.name)
	}
}

// TestTrackedRewindAfterGuestIO: the host functions that write into
// linear memory for the guest — fd_read (a file read into a buffer),
// random_get, clock_time_get, fd_filestat_get and fd_readdir, a tool's
// answer — write pages outside the VM's hot set, and the rewind finds
// them; each such eval is followed by 1+1 (the hot set again).
func TestTrackedRewindAfterGuestIO(t *testing.T) {
	r := newRewinder(t, []string{"echo"})
	for range 2 {
		r.run("1+1")
		r.rewind("1+1")
	}
	for _, code := range []string{
		`File.write("/tmp/f", "Q" * 600_000); $q = File.read("/tmp/f"); File.open("/tmp/f") { |f| $b = f.sysread(300_000) }; 1`,
		`$r = Random.urandom(400_000); $s = Random.new_seed; $x = SecureRandom.hex(1000) rescue 1`,
		`$t = 20_000.times.map { [Process.clock_gettime(Process::CLOCK_MONOTONIC), Time.now.to_f] }; 1`,
		`200.times { |i| File.write("/tmp/s#{i}", "x" * i) }; $st = 200.times.map { |i| File.stat("/tmp/s#{i}").size }; $d = Dir.children("/tmp").sort; 1`,
		`$e = echo("E" * 700_000); 1`,
	} {
		r.run(code)
		r.rewind(clip(code, 30))
		r.run("1+1")
		r.rewind("1+1 after " + clip(code, 30))
	}
}

// TestTrackedRewindAfterPageoutAndCold: pages advised out (MADV_PAGEOUT:
// swapped out where the host has swap) or cold (MADV_COLD) between an
// eval and its rewind, or between a rewind and the next eval — the hot
// set's pages, the write-protected ones and the ones the eval just wrote
// — are restored all the same (a page written and then swapped out is
// still found: wasmtime's own reuse once missed exactly that,
// bytecodealliance/wasmtime#14357). Only a host with swap swaps pages
// out; with a 256 MiB swap file, 5,414 page entries were seen swapped
// out over the test, and a rewind that did not look at swapped-out pages
// left 811 pages differing from the checkpoint.
func TestTrackedRewindAfterPageoutAndCold(t *testing.T) {
	r := newRewinder(t, nil)
	for range 2 {
		r.run("1+1")
		r.rewind("1+1")
	}
	swapped := 0
	advise := func(advice int) {
		if err := unix.Madvise(r.mem(), advice); err != nil && advice == unix.MADV_COLD {
			t.Fatalf("madvise: %v", err)
		}
		swapped += len(pagesWhere(t, r.v, pmSwapped, 0))
	}
	for _, a := range []struct {
		name   string
		advice int
	}{{"MADV_PAGEOUT", unix.MADV_PAGEOUT}, {"MADV_COLD", unix.MADV_COLD}} {
		for i, code := range []string{`$a = "P" * 3_000_000; 1`, "1+1", `$h = {}; 30_000.times { |i| $h[i] = i.to_s }; 1`} {
			r.run(code)
			advise(a.advice) // after the eval's writes
			r.rewind(fmt.Sprintf("%s after eval %d", a.name, i))
			advise(a.advice) // before the next eval
			r.run("1+1")
			r.rewind(fmt.Sprintf("1+1 after %s %d", a.name, i))
		}
	}
	if b, err := os.ReadFile("/proc/swaps"); err == nil {
		t.Logf("swap: %d lines in /proc/swaps; %d page entries seen swapped out", strings.Count(string(b), "\n")-1, swapped)
	}
}

// TestTrackedRewindAfterResume: a session's state restored into a VM a
// pool rewound before (resume writes its pages from several threads)
// and run on is rewound to the checkpoint when the session ends, byte
// for byte.
func TestTrackedRewindAfterResume(t *testing.T) {
	ctx := context.Background()
	_, want, _ := checkpointedVM(t, nil)
	pa, pb := plainPool(t), plainPool(t)
	for range 3 { // pb's VM: rewound, with a hot set
		if out, err := pb.Eval(ctx, &Request{Code: "1+1", Limits: testLimits}); err != nil || out.Status != StatusOK {
			t.Fatal(err, out)
		}
	}
	a, _ := pa.NewSession()
	if out, _, err := a.Eval(ctx, &Request{Code: `$s = "R" * 2_000_000; x = 5; srand(3); rand`, Limits: testLimits}); err != nil || out.Status != StatusOK {
		t.Fatal(err, out)
	}
	st, err := a.Capture(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := pb.RestoreSession(st)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := b.Eval(ctx, &Request{Code: `[$s.size, x, $t = "T" * 500_000].size`, Limits: testLimits}); err != nil || out.Status != StatusOK || out.Value != int64(3) {
		t.Fatal(err, out)
	}
	v := b.vm
	b.Close() // back to pb, to be rewound
	if got := pb.idle.take(v.toolsKey, false); got != v {
		t.Fatalf("the session's VM did not go back to its pool (took %p, want %p)", got, v)
	}
	defer v.close()
	if v.dirty {
		if err := v.rewind(); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := diffPages(v.mem.Data(v.store.Context()), want, 0); n > 0 {
		t.Fatalf("%d pages differ from the checkpoint after the resumed session's VM was rewound", n)
	}
}

// plainPool is a pool of the test engine without tools, mounts or a
// ready VM, closed when t ends.
func plainPool(t *testing.T) *Pool {
	t.Helper()
	p, err := testEngine.NewPool(context.Background(), 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestTrackedSlotResetForTheNextVM: a tracked VM's memory, freed with
// write-protected pages and pages its last eval wrote, is reset for the
// next VM of its group: that VM starts byte for byte at the snapshot,
// with no page left write-protected.
func TestTrackedSlotResetForTheNextVM(t *testing.T) {
	want := snapshotBytes(t)
	h := &idleVMs{}
	defer h.close()
	v, err := testEngine.prepared(testEngine.base, nil, nil, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"1+1", `$a = "W" * 3_000_000; 1`} {
		if out := v.run(context.Background(), &Request{Code: code, Limits: testLimits}); out.Status != StatusOK {
			t.Fatal(out)
		}
		if code == "1+1" {
			if err := v.rewind(); err != nil {
				t.Fatal(err)
			}
			if err := v.renew(); err != nil {
				t.Fatal(err)
			}
		}
	}
	reused := testEngine.MemoryStats().Reused
	v.close()
	n, err := testEngine.newVM(testEngine.base, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	if testEngine.MemoryStats().Reused == reused {
		t.Skip("the next VM did not take the freed memory (another test's VM did)")
	}
	if got := n.mem.Data(n.store.Context()); !bytesEqual(got, want) {
		d, _ := diffPages(got, want, 0)
		t.Fatalf("the next VM's memory differs from the snapshot in %d pages", d)
	}
	if wp := pagesWhere(t, n, pmUffdWP, 0); len(wp) > 0 {
		t.Fatalf("%d pages of the reset memory are still write-protected", len(wp))
	}
}

// TestTrackedVMThatGrewIsNotRewound: memory.grow past the snapshot's
// size (pages past the old end written) leaves the VM unrewindable: it
// is freed, whatever tracking says of the pages below.
func TestTrackedVMThatGrewIsNotRewound(t *testing.T) {
	r := newRewinder(t, nil)
	r.run("1+1")
	r.rewind("1+1")
	r.run(`$g = "G" * (300 << 20); 1`)
	if len(r.mem()) <= len(r.want) {
		t.Fatalf("the eval did not grow memory (%d bytes)", len(r.mem()))
	}
	if err := r.v.rewind(); err == nil {
		t.Fatal("a VM whose memory grew was rewound")
	}
}

// TestTrackedHotSetRelearnt: over a mix of evals, with the hot set
// renewed every few rewinds and with and without page faults elsewhere
// in the process, every rewind is exact; and after a large eval, the
// rewinds of 1+1 come back to restoring what 1+1 writes instead of
// keeping the large eval's pages.
func TestTrackedHotSetRelearnt(t *testing.T) {
	prev := wt.SetTrackRenewal(3)
	defer wt.SetTrackRenewal(prev)
	r := newRewinder(t, nil)
	var stop atomic.Bool
	defer stop.Store(true)
	small := func(what string) uint64 {
		r.run("1+1")
		return r.rewind(what)
	}
	var base uint64
	for i := range 4 {
		base = small(fmt.Sprintf("1+1 #%d", i))
	}
	for round, big := range []string{`$a = "B" * 8_000_000; 1`, `$h = (1..50_000).to_h { |i| [i, i.to_s] }; 1`, `raise "x" * 2_000_000`} {
		if round == 1 {
			go func() { // page faults in the process: rewinds cannot skip their scan
				for !stop.Load() {
					b := make([]byte, 4<<20)
					for i := 0; i < len(b); i += 4096 {
						b[i] = 1
					}
				}
			}()
		}
		r.run(big)
		bigN := r.rewind(fmt.Sprintf("round %d big", round))
		var last uint64
		for i := range 6 {
			last = small(fmt.Sprintf("round %d 1+1 #%d", round, i))
		}
		t.Logf("round %d: 1+1 restored %d pages before, %d after an eval that needed %d", round, base, last, bigN)
		if wt.WriteTracking() && last > 2*base+64 {
			t.Errorf("round %d: 1+1 still restores %d pages after the big eval (%d before it)", round, last, base)
		}
	}
}

// TestRewindWithoutTracking: with tracking turned off (as on a kernel
// without it), checkpoints are not tracked and rewinds restore every
// page copied since the memory was mapped, exactly; a VM armed while
// tracking was on and rewound after it was turned off falls back too.
func TestRewindWithoutTracking(t *testing.T) {
	armed := newRewinder(t, []string{"echo"})
	armed.run("1+1")
	armed.rewind("armed 1+1")
	wt.SetWriteTracking(false)
	defer wt.SetWriteTracking(true)
	if wt.WriteTracking() {
		t.Fatal("WriteTracking reports on after SetWriteTracking(false)")
	}
	r := newRewinder(t, []string{"echo"})
	m0 := testEngine.MemoryStats()
	for _, rw := range []*rewinder{armed, r} {
		for _, code := range []string{
			"1+1",
			`$a = "A" * 2_000_000; $r = Random.urandom(100_000); 1`,
			`File.write("/tmp/f", "Q" * 300_000); $q = File.read("/tmp/f"); 1`,
			`$e = echo("E" * 200_000); 1`,
			"1+1",
		} {
			rw.run(code)
			rw.rewind("untracked " + code)
		}
	}
	m1 := testEngine.MemoryStats()
	if m1.Tracked != m0.Tracked {
		t.Errorf("%d rewinds were tracked with tracking off", m1.Tracked-m0.Tracked)
	}
	if m1.Rewound-m0.Rewound < 10 {
		t.Errorf("%d rewinds, want 10", m1.Rewound-m0.Rewound)
	}
	if wp := pagesWhere(t, armed.v, pmUffdWP, 0); len(wp) > 0 {
		t.Errorf("%d pages stay write-protected after the fallback", len(wp))
	}
}

// TestWriteTrackingEnvOff: GLOVEBOX_WRITE_TRACKING=off in a process's
// environment turns tracking off for it (a child test process checks).
func TestWriteTrackingEnvOff(t *testing.T) {
	if os.Getenv("GLOVEBOX_TRACKING_CHILD") == "1" {
		if wt.WriteTracking() {
			t.Fatal("tracking is on with GLOVEBOX_WRITE_TRACKING=off")
		}
		r := newRewinder(t, nil)
		m0 := testEngine.MemoryStats()
		for range 3 {
			r.run(`$a = "x" * 100_000; 1`)
			r.rewind("1+1")
		}
		if m := testEngine.MemoryStats(); m.Tracked != m0.Tracked || m.Rewound-m0.Rewound != 3 {
			t.Fatalf("stats %+v after %+v", m, m0)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestWriteTrackingEnvOff$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "GLOVEBOX_TRACKING_CHILD=1", "GLOVEBOX_WRITE_TRACKING=off")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
