package engine

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestAttackRewoundVMStillWatchedByItsLastEval: a tool-using eval's VM
// goroutine used to rewind the VM and hand it to the idle list before it
// reported to Eval. If Eval's deadline fired in that window (a busy
// machine deschedules the goroutine), Eval went on watching a VM that the
// next eval had already taken: seeing that eval inside a tool call, it
// gave up on it — marked the other eval's VM abandoned, returned the
// other eval's output as its own, and left the other eval waiting forever
// for a VM nobody would report. The hook holds the goroutine in that
// window while the next eval takes whatever VM is idle.
func TestAttackRewoundVMStillWatchedByItsLastEval(t *testing.T) {
	tools := []string{"probe"}
	release := make(chan struct{})
	var bInTool atomic.Bool
	call := func(ctx context.Context, c *Call) ([]byte, error) {
		if c.Args[0] == "B" {
			bInTool.Store(true)
			<-release
		}
		return Answer(nil, true, 8)
	}
	limA := testLimits
	limA.Timeout = 50 * time.Millisecond
	reqA := &Request{Code: `probe("A"); puts "A-OUT"; 1`, Limits: limA, Tools: tools, Call: call}
	reqB := &Request{Code: `puts "B-SECRET"; probe("B"); 2`, Limits: testLimits, Tools: tools, Call: call}

	type res struct {
		out *Outcome
		err error
	}
	bDone := make(chan res, 1)
	var hooked atomic.Bool
	start := time.Now()
	testHookSettled = func() {
		if !hooked.CompareAndSwap(false, true) {
			return
		}
		// A's VM has returned and settled. B starts now and takes an idle
		// VM with the same tools, if A's is idle already.
		go func() {
			out, err := testEngine.Eval(context.Background(), reqB)
			bDone <- res{out, err}
		}()
		for !bInTool.Load() && time.Since(start) < 5*time.Second {
			time.Sleep(time.Millisecond)
		}
		// Past A's deadline and grace, with B inside its tool call.
		time.Sleep(time.Until(start.Add(limA.Timeout + 3*abandonGrace)))
	}
	defer func() { testHookSettled = nil }()
	outA, err := testEngine.Eval(context.Background(), reqA)
	testHookSettled = nil
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	var b res
	select {
	case b = <-bDone:
	case <-time.After(20 * time.Second):
		t.Fatal("B never returned: the VM it ran in was given up by A's Eval, and nobody reports it")
	}
	if outA.Status != StatusOK || string(outA.Stdout) != "A-OUT\n" {
		t.Fatalf("A ended %s with stdout %q (%+v): it reported on a VM it no longer owned", outA.Status, outA.Stdout, outA.Error)
	}
	if b.err != nil || b.out.Status != StatusOK || string(b.out.Stdout) != "B-SECRET\n" {
		t.Fatalf("B: %v %+v", b.err, b.out)
	}
}

// diffPages counts the 4 KiB pages where a and b differ, and those of
// them in the last tail bytes.
func diffPages(a, b []byte, tail int) (n, inTail int) {
	for p := 0; p+4096 <= len(a) && p+4096 <= len(b); p += 4096 {
		if !bytes.Equal(a[p:p+4096], b[p:p+4096]) {
			n++
			if p >= len(a)-tail {
				inTail++
			}
		}
	}
	return n, inTail
}

// allFaults is the process's page faults so far, minor and major, as
// the rewind counts them.
func allFaults() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Minflt + ru.Majflt
}

// TestAttackRewindExactAfterAdversarialWrites: whatever way an eval
// writes its memory — fresh heap pages, the free heap's headroom, pages
// the host fills (random_get, fd_read, a tool's answer, the clock),
// fiber stacks, deep rescue chains that use the setjmp region at the end
// of the image — the rewind puts every byte and global back, whether the
// process took page faults meanwhile (a goroutine faulting pages in the
// background) or none at all (the rewind then skips its scan: evals that
// write only pages the last scan found).
func TestAttackRewindExactAfterAdversarialWrites(t *testing.T) {
	tools := []string{"echo"}
	v, want, wantGlobals := checkpointedVM(t, tools)
	c := v.store.Context()
	call := func(ctx context.Context, c *Call) ([]byte, error) { return Answer(nil, c.Args[0], 8) }
	lim := testLimits
	lim.FS = FSLimits{Write: 64 << 20, Creates: 100}
	writers := []string{
		`$a = "A" * 5_000_000; 1`,
		`$r = Random.urandom(1 << 20); $r2 = Random.bytes(300_000); 1`,
		`File.write("/tmp/f", "Q" * 3_000_000); $q = File.read("/tmp/f"); File.open("/tmp/f") { |f| $q2 = f.sysread(2_000_000) }; 1`,
		`$e = echo("E" * 500_000); 1`,
		`$h = "H" * (24 << 20); 1`,
		`$t = 5000.times.map { Process.clock_gettime(Process::CLOCK_MONOTONIC) }; 1`,
		`$en = (1..Float::INFINITY).lazy.map { _1 * 2 }.each_slice(3); $x = 50.times.map { Enumerator.new { |y| y << 1; y << 2 }.tap(&:next) }; 1`,
		`def rr(n) = (begin; n.zero? ? raise("x") : rr(n - 1); rescue => e; raise e; ensure; $z = n; end); (rr(2000) rescue 1)`,
		`def deep(n) = deep(n + 1); begin; deep(0); rescue SystemStackError; end; def dd(n) = [n, dd(n + 1)].inspect; (begin; dd(0); rescue SystemStackError; end); 1`,
		`a = Array.new(200_000) { |i| i.to_s }; a.sort!.reverse!; GC.start; GC.compact rescue nil; 1`,
		`raise "after " + "writing " * 100_000`,
	}
	quiet := []string{"1+1", "nil", "1+1"}
	var stop atomic.Bool
	faulter := func() {
		for !stop.Load() {
			b := make([]byte, 8<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
		}
	}
	skips, runs := 0, 0
	lastFaults := int64(-1)
	check := func(phase, code string) {
		t.Helper()
		runs++
		out := v.run(context.Background(), &Request{Code: code, Limits: lim, Tools: tools, Call: call})
		if out.Trapped || (out.Status != StatusOK && out.Status != StatusError) {
			t.Fatalf("%s %q: %s %+v", phase, code, out.Status, out.Error)
		}
		written, tail := -1, -1
		if phase != "quiet" {
			written, tail = diffPages(v.mem.Data(c), want, 16<<20)
		}
		f := allFaults()
		if f == lastFaults {
			skips++
		}
		if err := v.rewind(); err != nil {
			t.Fatalf("%s %q: %v", phase, code, err)
		}
		lastFaults = allFaults()
		got := v.mem.Data(c)
		if len(got) != len(want) {
			t.Fatalf("%s %q: memory is %d bytes, want %d", phase, code, len(got), len(want))
		}
		if n, _ := diffPages(got, want, 0); n > 0 {
			t.Fatalf("%s %q (it changed %d pages, %d in the last 16 MiB): %d pages differ from the checkpoint after the rewind", phase, code, written, tail, n)
		}
		for j, g := range snapGlobals(t, v) {
			if g != wantGlobals[j] {
				t.Fatalf("%s %q: global %d is %d, want %d", phase, code, j, g, wantGlobals[j])
			}
		}
		if err := v.renew(); err != nil {
			t.Fatal(err)
		}
		if testing.Verbose() && phase != "quiet" {
			t.Logf("%s %q: %d pages changed, %d in the last 16 MiB", phase, code[:min(len(code), 40)], written, tail)
		}
	}
	for _, code := range writers {
		check("alone", code)
		for _, q := range quiet {
			check("quiet", q)
		}
	}
	go faulter()
	for _, code := range writers {
		check("faulting", code)
		check("faulting", "1+1")
	}
	stop.Store(true)
	t.Logf("%d runs; %d with no page fault in the process between rewinds (the scan skipped)", runs, skips)
}

// TestAttackRewoundVMKeepsItsTools: an idle VM serves only evals with
// exactly the tools it was prepared with: an eval with fewer, more or
// other tools never gets one (its methods would be wrong), and every
// eval sees exactly its own tools as methods.
func TestAttackRewoundVMKeepsItsTools(t *testing.T) {
	call := func(ctx context.Context, c *Call) ([]byte, error) { return Answer(nil, c.Name, 8) }
	sets := [][]string{{"alpha"}, nil, {"alpha", "beta"}, {"beta"}, {"beta", "alpha"}, {"alpha"}, nil}
	_, ru0 := testEngine.ReuseStats()
	defer func() {
		// The idle list keeps maxIdleVMs, least recently used out.
		_, ru1 := testEngine.ReuseStats()
		t.Logf("%d of %d evals took a rewound VM", ru1-ru0, 3*len(sets))
		if ru1 == ru0 {
			t.Error("no eval took a rewound VM")
		}
	}()
	for round := range 3 {
		for _, tools := range sets {
			req := &Request{Limits: testLimits, Tools: tools, Call: call,
				Code: `%w[alpha beta].select { |m| respond_to?(m, true) } + [(alpha rescue "none")]`}
			if tools == nil {
				req.Call = nil
			}
			got := evalOK(t, req).([]any)
			want := []any{}
			for _, n := range tools {
				want = append(want, n)
			}
			slicesSortAny(want)
			if slices.Contains(tools, "alpha") {
				want = append(want, "alpha")
			} else {
				want = append(want, "none")
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d, tools %v: the eval saw %v, want %v", round, tools, got, want)
			}
		}
	}
}

func slicesSortAny(a []any) {
	slices.SortFunc(a, func(x, y any) int { return strings.Compare(x.(string), y.(string)) })
}
