package engine

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"
)

// evalOK runs code on the test engine without a pool and returns its value.
func evalOK(t *testing.T, req *Request) any {
	t.Helper()
	out, err := testEngine.Eval(context.Background(), req)
	if err != nil || out.Status != StatusOK {
		t.Fatalf("%q: %v %+v %+v", req.Code, err, out, out.Error)
	}
	return out.Value
}

// TestRewoundVMIsClean: a VM rewound after a clean eval and taken by the
// next one shows that eval nothing of the last — globals, constants,
// monkey-patches, heap contents, ENV, open descriptors, scratch files, a
// replaced tool method, the random seed, the clock — and gives the same
// answers a new VM gives.
func TestRewoundVMIsClean(t *testing.T) {
	lim := testLimits
	lim.FS = FSLimits{Write: 1 << 20, Creates: 10}
	tools := []string{"lookup"}
	call := func(ctx context.Context, c *Call) ([]byte, error) { return Answer(nil, "tool:"+c.Name, 8) }
	req := func(code string) *Request { return &Request{Code: code, Limits: lim, Tools: tools, Call: call} }
	const dirty = `$leak = "SECRET"; LEAK = 1; class Integer; def to_s(*) = "patched"; end
class String; def leak? = true; end
def lookup(*) = "replaced"
secret = "HEAPSECRET" * 1000; $keep = secret
ENV["LEAK"] = "1"
f = File.open("/tmp/leak.txt", "w"); f.write("SECRET"); f.flush
g = File.open("/tmp/other.txt", "w")
srand(1); t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC); sleep 0.3
[f.fileno, g.fileno, rand(1 << 30), t0, Process.clock_gettime(Process::CLOCK_MONOTONIC)]`
	const probe = `f = File.open("/tmp/probe.txt", "w")
heap = ObjectSpace.each_object(String).any? { |s| s.size >= 10_000 && s.include?("HEAPSECRET") }
[defined?($leak), defined?(LEAK), 1.to_s + "".respond_to?(:leak?).to_s, lookup, ENV["LEAK"], heap,
 Dir.children("/tmp").sort, f.fileno, rand(1 << 30), Process.clock_gettime(Process::CLOCK_MONOTONIC)]`
	rw0, ru0 := testEngine.ReuseStats()
	mem0 := testEngine.MemoryStats()
	var freshFD any
	for round := range 6 {
		d := evalOK(t, req(dirty)).([]any)
		seeded, dirtyEnd := d[2], d[4].(float64)
		got := evalOK(t, req(probe)).([]any)
		if got[0] != nil || got[1] != nil || got[2] != "1false" || got[3] != "tool:lookup" || got[4] != nil || got[5] != false {
			t.Fatalf("round %d: the next eval saw the last one's state: %v", round, got)
		}
		if !slices.Equal(got[6].([]any), []any{"probe.txt"}) {
			t.Fatalf("round %d: scratch holds %v", round, got[6])
		}
		if round == 0 {
			freshFD = got[7]
		} else if got[7] != freshFD {
			t.Fatalf("round %d: a new file got descriptor %v, not %v as in the first VM: descriptors leaked", round, got[7], freshFD)
		}
		if got[8] == seeded {
			t.Fatalf("round %d: the next eval has the last one's random seed", round)
		}
		if clock := got[9].(float64); clock >= dirtyEnd {
			t.Fatalf("round %d: the clock went on from the last eval (%v after %v): it did not restart", round, clock, dirtyEnd)
		}
	}
	rw1, ru1 := testEngine.ReuseStats()
	if rw1-rw0 < 10 || ru1-ru0 < 10 || testEngine.MemoryStats().Rewound-mem0.Rewound < 10 {
		t.Fatalf("VMs were not reused: %d rewound, %d taken again", rw1-rw0, ru1-ru0)
	}
}

// TestRewoundVMsDrawTheirOwnRandomNumbers: evals in rewound VMs, in new
// VMs and in VMs made with reuse off draw different random numbers (Ruby
// seeds its generator from the host's entropy on first use, and the
// checkpoint holds it unseeded), also after an eval seeded it itself.
func TestRewoundVMsDrawTheirOwnRandomNumbers(t *testing.T) {
	p, err := testEngine.NewPool(context.Background(), 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.DisableReuse()
	seen := map[any]bool{}
	for i := range 12 {
		code := "rand(1 << 62)"
		if i%3 == 0 {
			code = "srand(7); rand(1 << 62)" // the same every time: not counted
		}
		var out *Outcome
		if i%4 == 2 { // a VM prepared with tools: its checkpoint must hold the generator unseeded too
			call := func(ctx context.Context, c *Call) ([]byte, error) { return Answer(nil, 1, 8) }
			out, err = testEngine.Eval(context.Background(), &Request{Code: code, Limits: testLimits, Tools: []string{"one"}, Call: call})
		} else if i%2 == 0 {
			out, err = testEngine.Eval(context.Background(), &Request{Code: code, Limits: testLimits})
		} else {
			out, err = p.Eval(context.Background(), &Request{Code: code, Limits: testLimits})
		}
		if err != nil || out.Status != StatusOK {
			t.Fatal(err, out)
		}
		if i%3 == 0 {
			continue
		}
		if seen[out.Value] {
			t.Fatalf("two evals drew %v", out.Value)
		}
		seen[out.Value] = true
	}
}

// TestRewindRefusals: a VM whose eval trapped, was stopped or grew its
// memory is freed, not rewound, and the next eval runs normally.
func TestRewindRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		lim        func(*Limits)
		want       Status
	}{
		{"timeout", "loop {}", func(l *Limits) { l.Timeout = 50 * time.Millisecond }, StatusTimeout},
		{"fuel", "loop {}", func(l *Limits) { l.Fuel = 5_000_000 }, StatusFuelExhausted},
		{"memory grown", `$a = "x" * (300 << 20); 1`, func(l *Limits) {}, StatusOK},
		{"memory limit", `a = []; loop { a << "x" * (1 << 20) }`, func(l *Limits) { l.Memory = 300 << 20 }, StatusMemoryLimit},
		{"stack", "def f = f; f", func(l *Limits) {}, StatusError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits
			tc.lim(&lim)
			rw0, _ := testEngine.ReuseStats()
			out, err := testEngine.Eval(context.Background(), &Request{Code: tc.code, Limits: lim})
			if err != nil || out.Status != tc.want {
				t.Fatalf("%v %+v %+v", err, out, out.Error)
			}
			if rw1, _ := testEngine.ReuseStats(); rw1 != rw0 && (out.Trapped || tc.name == "memory grown") {
				t.Fatalf("a VM that ended %s (trapped %v) was rewound", out.Status, out.Trapped)
			}
			if v := evalOK(t, &Request{Code: "[$a, 1 + 1]", Limits: testLimits}); !slices.Equal(v.([]any), []any{nil, int64(2)}) {
				t.Fatalf("the next eval got %v", v)
			}
		})
	}
}

// BenchmarkEvalRewound is 1+1 back-to-back through Eval, each in a VM
// rewound after the last, beside the floor (1+1 again in the same VM
// without a rewind).
func BenchmarkEvalRewound(b *testing.B) {
	req := &Request{Code: "1+1", Limits: testLimits}
	var d []time.Duration
	for b.Loop() {
		t := time.Now()
		if out, err := testEngine.Eval(context.Background(), req); err != nil || out.Status != StatusOK {
			b.Fatal(err, out)
		}
		d = append(d, time.Since(t))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkRewindPhases times the parts of rewinding and renewing a VM
// after 1+1, with the pages each rewind copies.
func BenchmarkRewindPhases(b *testing.B) {
	h := &idleVMs{}
	defer h.close()
	req := &Request{Code: "1+1", Limits: testLimits}
	v, err := testEngine.prepared(testEngine.base, nil, nil, nil, h)
	if err != nil {
		b.Fatal(err)
	}
	var tMem, tRest, tRenew, tEval time.Duration
	var pages int
	for b.Loop() {
		t0 := time.Now()
		if out := v.run(context.Background(), req); out.Status != StatusOK {
			b.Fatal(out)
		}
		restored := testEngine.MemoryStats().Restored
		t1 := time.Now()
		if err := v.rewindMemory(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		pages += int(testEngine.MemoryStats().Restored - restored)
		if err := v.rewindHost(); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if err := v.renew(); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		tEval += t1.Sub(t0)
		tMem += t2.Sub(t1)
		tRest += t3.Sub(t2)
		tRenew += t4.Sub(t3)
	}
	n := float64(b.N)
	for name, d := range map[string]time.Duration{"eval": tEval, "memory": tMem, "globals+wasi+wipe": tRest, "renew": tRenew} {
		b.ReportMetric(float64(d.Nanoseconds())/1e3/n, name+"-µs")
	}
	b.ReportMetric(float64(pages)/n, "pages")
	v.close()
}

// TestRewindRestoresMemoryExactly: after each rewind the VM's linear
// memory and globals are byte for byte what they were at the checkpoint,
// whatever the eval did: wrote pages it never wrote before (so that the
// rewind has to scan for them), wrote nothing new, raised, used files, or
// ran a tool; and whether or not the process took page faults between
// rewinds (the rewind skips its scan only when it took none).
func TestRewindRestoresMemoryExactly(t *testing.T) {
	v, want, wantGlobals := checkpointedVM(t, []string{"echo"})
	c := v.store.Context()
	call := func(ctx context.Context, c *Call) ([]byte, error) { return Answer(nil, c.Args, 8) }
	lim := testLimits
	lim.FS = FSLimits{Write: 1 << 20, Creates: 10}
	for i, code := range []string{
		"1+1",
		"1+1",
		`$x = "A" * 200_000; "B" * 100_000; 3`, // new pages
		"1+1",
		`raise "boom"`,
		`File.write("/tmp/a", "x" * 50_000); File.read("/tmp/a").size`,
		`echo(1, "two", [3])`,
		`GC.start; ObjectSpace.each_object(String).count`,
		"1+1",
	} {
		out := v.run(context.Background(), &Request{Code: code, Limits: lim, Tools: []string{"echo"}, Call: call})
		if out.Trapped {
			t.Fatalf("%q trapped: %+v", code, out.Error)
		}
		if i == 4 {
			_ = make([]byte, 64<<20) // page faults in the process: the next rewind must scan
		}
		if err := v.rewind(); err != nil {
			t.Fatalf("after %q: %v", code, err)
		}
		got := v.mem.Data(c)
		if len(got) != len(want) {
			t.Fatalf("after %q: memory is %d bytes, want %d", code, len(got), len(want))
		}
		if !bytes.Equal(got, want) {
			n := 0
			for p := 0; p < len(got); p += 4096 {
				if !bytes.Equal(got[p:p+4096], want[p:p+4096]) {
					n++
				}
			}
			t.Fatalf("after %q: %d pages differ from the checkpoint", code, n)
		}
		for j, g := range snapGlobals(t, v) {
			if g != wantGlobals[j] {
				t.Fatalf("after %q: global %d is %d, want %d", code, j, g, wantGlobals[j])
			}
		}
		if err := v.renew(); err != nil {
			t.Fatal(err)
		}
	}
}

// snapGlobals reads v's mutable globals in checkpoint order.
func snapGlobals(t *testing.T, v *VM) []uint64 {
	t.Helper()
	var out []uint64
	for _, g := range testEngine.base.globals {
		b, ok := v.inst.GlobalBits(v.store.Context(), g.name)
		if !ok {
			t.Fatalf("global %s unreadable", g.name)
		}
		out = append(out, b)
	}
	return out
}

// TestNoRewindWhenCodeWritesTables: a snapshot whose guest code writes a
// table or drops a segment (stateWriter found one) gives VMs without a
// checkpoint: each is freed after its eval, never rewound.
func TestNoRewindWhenCodeWritesTables(t *testing.T) {
	snap := *testEngine.base
	snap.rewindable = false
	h := &idleVMs{}
	defer h.close()
	v, err := testEngine.prepared(&snap, nil, nil, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	if out := v.run(context.Background(), &Request{Code: "1+1", Limits: testLimits}); out.Status != StatusOK {
		t.Fatal(out)
	}
	if v.ck != nil || v.rewind() == nil {
		t.Fatal("a VM of a snapshot that is not rewindable was rewound")
	}
}

// TestFuelSameWhateverTheVM: an eval's fuel is the same whether its VM
// was rewound, made for it, or waiting in a pool (made warm either way).
func TestFuelSameWhateverTheVM(t *testing.T) {
	lim := testLimits
	lim.Fuel = 1 << 40
	req := &Request{Code: `[1, 2, 3].map { |x| x * 2 }.sum`, Limits: lim}
	made, err := testEngine.NewPool(context.Background(), 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer made.Close()
	made.DisableReuse()
	pooled, err := testEngine.NewPool(context.Background(), 2, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Close()
	pooled.DisableReuse()
	var want uint64
	for i := range 9 {
		var out *Outcome
		switch i % 3 {
		case 0:
			out, err = testEngine.Eval(context.Background(), req)
		case 1:
			out, err = made.Eval(context.Background(), req)
		case 2:
			time.Sleep(20 * time.Millisecond) // the filler has a VM ready
			out, err = pooled.Eval(context.Background(), req)
		}
		if err != nil || out.Status != StatusOK {
			t.Fatal(err, out)
		}
		if i == 0 {
			want = out.FuelUsed
		} else if out.FuelUsed != want {
			t.Fatalf("eval %d (%s) used %d fuel, the first %d", i, []string{"rewound", "made", "pooled"}[i%3], out.FuelUsed, want)
		}
	}
}

// checkpointedVM is a VM prepared with tools and checkpointed for reuse
// (freed when t ends), with its linear memory and globals at the
// checkpoint.
func checkpointedVM(t *testing.T, tools []string) (*VM, []byte, []uint64) {
	t.Helper()
	h := &idleVMs{}
	t.Cleanup(h.close)
	v, err := testEngine.prepared(testEngine.base, nil, tools, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.close)
	if v.ck == nil {
		t.Fatal("no checkpoint")
	}
	return v, append([]byte(nil), v.mem.Data(v.store.Context())...), append([]uint64(nil), v.ck.bits...)
}

// TestCheckpointsShared: VMs prepared alike for one holder keep one copy
// of their memory checkpoint between them, not one each (issue 22, F20:
// the copy is 74 pages, 0.30 MB, for the base snapshot, and every idle
// VM and session held its own), a VM with other tools has its own, and
// each VM still rewinds to its checkpoint byte for byte after an eval
// that writes the pages the checkpoint holds.
func TestCheckpointsShared(t *testing.T) {
	h := &idleVMs{}
	defer h.close()
	var vms []*VM
	defer func() {
		for _, v := range vms {
			v.close()
		}
	}()
	for _, tools := range [][]string{nil, nil, nil, {"other"}} {
		v, err := testEngine.prepared(testEngine.base, nil, tools, nil, h)
		if err != nil {
			t.Fatal(err)
		}
		vms = append(vms, v)
	}
	want := slices.Clone(vms[0].mem.Data(vms[0].store.Context()))
	d0 := vms[0].inst.CheckpointData()
	defer d0.Release()
	if d0 == nil {
		t.Fatal("a VM prepared with a holder has no checkpoint")
	}
	for i, v := range vms[1:] {
		d := v.inst.CheckpointData()
		if same, other := d0.Same(d), len(v.toolsKey) > 0; same == other {
			t.Errorf("VM %d (tools %q): shares the first VM's checkpoint: %v", i+1, v.toolsKey, same)
		}
		d.Release()
	}
	// Writes all over the heap, the pages the checkpoint holds included.
	req := &Request{Code: `a = Array.new(20_000) { |i| "s#{i}" * 3 }; GC.start; a.size`, Limits: testLimits}
	for i, v := range vms[:3] {
		if out := v.run(context.Background(), req); out.Status != StatusOK {
			t.Fatal(out)
		}
		if err := v.rewind(); err != nil {
			t.Fatal(err)
		}
		if !bytesEqual(v.mem.Data(v.store.Context()), want) {
			t.Errorf("VM %d: memory after the rewind differs from its checkpoint", i)
		}
		if err := v.renew(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRewoundVMScratchEmptyWhateverMadeTheName: a rewind skips wiping
// the scratch directory, and keeps the VM's file-system guard, only when
// the guest called none of the calls that make a name (path_open with
// O_CREAT, path_create_directory, path_symlink, path_link, path_rename).
// After an eval that made a name through any of them, the next eval in
// the rewound VM finds /tmp empty; after one that closed its stdout, the
// next one's output still arrives; and an eval after one that used no
// file at all has its whole quota of names.
func TestRewoundVMScratchEmptyWhateverMadeTheName(t *testing.T) {
	lim := testLimits
	lim.FS = FSLimits{Write: 1 << 20, Creates: 20}
	run := func(code string) *Outcome {
		t.Helper()
		out, err := testEngine.Eval(context.Background(), &Request{Code: code, Limits: lim})
		if err != nil || out.Trapped || (out.Status != StatusOK && out.Status != StatusError) {
			t.Fatalf("%q: %v %+v", code, err, out)
		}
		return out
	}
	empty := `Dir.children("/tmp")`
	for _, code := range []string{
		`File.write("/tmp/a", "x")`,
		`IO.sysopen("/tmp/b", File::WRONLY | File::CREAT).close`,
		`Dir.mkdir("/tmp/d")`,
		`File.symlink("/tmp/nowhere", "/tmp/abs")`,
		`File.symlink("rel", "/tmp/rel")`,
		`File.write("/tmp/a", "x"); File.link("/tmp/a", "/tmp/l"); File.unlink("/tmp/a")`,
		`File.write("/tmp/a", "x"); File.rename("/tmp/a", "/tmp/r")`,
		`File.write("/tmp/keep", "x"); $f = File.open("/tmp/keep")`, // still open at the end
	} {
		run("1+1") // a VM whose guard was kept, its scratch wiped
		run(code)
		if out := run(empty); out.Status != StatusOK || len(out.Value.([]any)) != 0 {
			t.Fatalf("after %q the next eval's /tmp holds %v", code, out.Value)
		}
	}
	run(`$stdout.close; 1`)
	if out := run(`puts "still here"; 1`); string(out.Stdout) != "still here\n" {
		t.Fatalf("after an eval closed stdout, the next one printed %q", out.Stdout)
	}
	run("1+1") // no file used: the guard is kept
	if out := run(`20.times { |i| File.write("/tmp/n#{i}", "") }; Dir.children("/tmp").size`); out.Status != StatusOK || out.Value != int64(20) {
		t.Fatalf("an eval in a VM whose guard was kept could not make its 20 names: %v %+v", out.Value, out.Error)
	}
}

// TestRewoundVMDescriptorsAsNew: a rewind keeps the VM's WASI context
// and guard when its guest left only the preopened directory open and
// the standard streams its own; whatever an eval did with descriptors —
// opened and closed files and directories, closed or reopened the
// standard streams or the preopened directory, left a file open, set a
// descriptor non-blocking — the next eval in the rewound VM sees the
// descriptors a new VM's eval sees: the same open ones, the same number
// for its next file, working output.
func TestRewoundVMDescriptorsAsNew(t *testing.T) {
	lim := testLimits
	lim.FS = FSLimits{Write: 1 << 20, Creates: 50}
	fresh := plainPool(t)
	fresh.DisableReuse()
	const probe = `open = (0..12).select { |fd| (IO.for_fd(fd, autoclose: false).stat; true) rescue false }
$stdout.write("out"); $stderr.write("err")
f = File.open("/tmp/probe", "w"); n = f.fileno; f.close
[open, n, Dir.children("/tmp")]`
	want, err := fresh.Eval(context.Background(), &Request{Code: probe, Limits: lim})
	if err != nil || want.Status != StatusOK {
		t.Fatal(err, want)
	}
	run := func(code string) *Outcome {
		t.Helper()
		out, err := testEngine.Eval(context.Background(), &Request{Code: code, Limits: lim})
		if err != nil || out.Trapped {
			t.Fatalf("%q: %v %+v", code, err, out)
		}
		return out
	}
	for _, code := range []string{
		"1+1",
		`10.times { |i| File.write("/tmp/f#{i}", "x") }; fs = 10.times.map { |i| File.open("/tmp/f#{i}") }; fs.each(&:close); 1`,
		`a = File.open("/tmp/a", "w"); b = File.open("/tmp/b", "w"); a.close; 1`,
		`d = Dir.open("/tmp"); d.close; e = Dir.open("/tmp"); 1`,
		`IO.for_fd(3).close; 1`,
		`$stdin.close; 1`,
		`$stderr.close; 1`,
		`$stdout.reopen(File.open("/tmp/o", "w")); 1`,
		`File.open("/tmp/nb", "w") { |f| f.nonblock = true rescue nil }; $stdout.nonblock = true rescue nil; 1`,
		`IO.for_fd(3, autoclose: false).stat; 1`,
	} {
		run("1+1")
		run(code)
		got := run(probe)
		if got.Status != StatusOK || !sameValue(got.Value, want.Value) || string(got.Stdout) != "out" || string(got.Stderr) != "err" {
			t.Fatalf("after %q the next eval saw %v %q %q %+v; a new VM's eval %v", code, got.Value, got.Stdout, got.Stderr, got.Error, want.Value)
		}
	}
}
