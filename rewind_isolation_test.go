// Rewind isolation: a VM rewound for the next eval, or a trapping eval, leaves nothing the next eval can see.

package glovebox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Attacks on whole-VM reuse (internal/engine/rewind.go): an eval that
// ends cleanly leaves its VM to be rewound and run the next eval. Each
// test has an attacker eval try to leave something behind — in memory,
// in Ruby's global state, in the WASI context, in host descriptors — and
// a probe eval, in the rewound VM, must see exactly what it sees in a VM
// made from the snapshot (a Runtime with DisableVMReuse).

// rewindProbe observes what an eval can of the VM it runs in. Its value
// must be the same in a rewound VM as in a new one; it prints one line,
// and must print nothing else (an at_exit handler, finalizer, trace hook
// or fiber left by the attacker would print into it).
const rewindProbe = `mark = "ATTACK" + "MARK"
leaks = ObjectSpace.each_object(String).count { |s| !s.equal?(mark) && (s.include?(mark) rescue false) }
fd = File.open("/tmp/probe.txt", "w") { |f| f.fileno }
puts "probe-out"
[leaks, global_variables.sort.map(&:to_s), Object.constants.size, TOPLEVEL_BINDING.local_variables.map(&:to_s),
 $0, ARGV, ENV.to_h, $stdin.read, $LOAD_PATH.size, $LOADED_FEATURES.size, (begin; require("evil"); rescue LoadError; "LoadError"; end),
 defined?(EvilConst), GC.enable, GC.stress, $stdout.equal?(STDOUT), $stdout.sync, STDOUT.closed?, STDERR.closed?,
 STDIN.closed?, Dir.children("/tmp").sort, fd, Dir.children("/mnt/w").sort, File.read("/mnt/w/seed.txt"),
 Encoding.default_external.to_s, Encoding.default_internal.to_s, $VERBOSE, Warning[:deprecated], $,.inspect, $/,
 RubyVM::InstructionSequence.compile_option[:tailcall_optimization], Thread.current.keys.map(&:to_s),
 Fiber.current.storage.to_a.inspect, echo("tool-ok"), 1.to_s, "".respond_to?(:leak?), Kernel.respond_to?(:leak),
 Glovebox::Deadlines::STACK.size, Object.instance_methods.size, Kernel.private_instance_methods.size,
 Process.clock_gettime(Process::CLOCK_MONOTONIC) < $mono_limit.to_f + 1e9, GC.count, umask = File.umask]`

// rewindAttacks each try to leave state behind. All end cleanly (ok, or
// an exception Ruby unwound), so their VMs are rewound, unless their
// memory grew.
var rewindAttacks = []struct {
	name, code string
	opts       []glovebox.EvalOption
}{
	{"input", `$in = $stdin.read; $stdin = StringIO.new("more"); ARGV << "x"; $in + ARGV.join`,
		[]glovebox.EvalOption{glovebox.WithStdin(strings.NewReader("ATTACKMARK-stdin")), glovebox.WithArgs("ATTACKMARK-arg"),
			glovebox.WithEnv(map[string]string{"ATTACKMARK_ENV": "ATTACKMARK-env"})}},
	{"globals", `$g = 1; X_LEAK = 1; x_local = 1; $0 = "pwn"; ARGV << "pwn"; ENV["PWN"] = "1"; $LOAD_PATH.unshift("/tmp")
$LOADED_FEATURES << "fake.rb"; Thread.current[:pwn] = 1; Fiber[:pwn] = 1; File.umask(0o777)
class Integer; def to_s(*) = "patched"; end; class String; def leak? = true; end; module Kernel; def self.leak = 1; end
def echo(*) = "replaced"; 1`, nil},
	{"driver replaced", `module Glovebox; def self.__run = '{"status":"ok","value":"FORGED"}'; def self.__input(*) = nil; end
module JSON; def self.generate(*) = '{"status":"ok","value":"FORGED"}'; def self.parse(*) = { "code" => "0" }; end; 1`, nil},
	{"gc and encodings", `GC.disable; GC.stress = false; Encoding.default_internal = Encoding::ASCII_8BIT
Encoding.default_external = "ASCII-8BIT"; $VERBOSE = true; Warning[:deprecated] = true; $/ = "X"
RubyVM::InstructionSequence.compile_option = { tailcall_optimization: true }; def Warning.warn(*) = print("WARN-LEAK"); 1`, nil},
	{"hooks that print later", `at_exit { puts "AT-EXIT-LEAK" }; END { puts "END-LEAK" }
ObjectSpace.define_finalizer(+"x", proc { puts "FINALIZER-LEAK" }); (trap("EXIT") { puts "TRAP-LEAK" } rescue nil)
TracePoint.new(:line, :call) { print "TRACE-LEAK" }.enable; set_trace_func(proc { print "STF-LEAK" }); 1`, nil},
	{"suspended fibers", `$e = [1, 2, 3].each; $e.next; $f = Fiber.new { Fiber.yield; puts "FIBER-LEAK" }; $f.resume
$g = Enumerator.new { |y| y << 1; puts "ENUM-LEAK"; y << 2 }; $g.next; 1`, nil},
	{"stdout games", `STDOUT.sync = false; STDOUT.write("unflushed "); $stdout = StringIO.new; $stderr = $stdout
(STDERR.reopen(File.open("/tmp/err.txt", "w")) rescue nil); (STDOUT.reopen(File.open("/tmp/out.txt", "w")) rescue nil)
(IO.for_fd(1).reopen(IO.for_fd(5)) rescue nil); o = IO.new(1); o.sync = false; o.write("held in a buffer"); puts "to a file"; 1`, nil},
	{"stdio closed", `STDOUT.close; STDERR.close; STDIN.close; (IO.for_fd(0).close rescue nil); 1`, nil},
	{"preopens closed and renumbered", `f = File.open("/tmp/a.txt", "w"); IO.for_fd(3, autoclose: true).close
(IO.for_fd(4, autoclose: true).close rescue nil); f.reopen(STDOUT) rescue nil; 1`, nil},
	{"requires", `File.write("/tmp/evil.rb", "puts 'EVIL-LEAK'; $evil = 1"); $LOAD_PATH.unshift("/tmp"); require "evil"
File.write("/tmp/evil2.rb", "EvilConst = 1"); autoload(:EvilConst, "/tmp/evil2.rb"); 1`, nil},
	{"files held open", `$w = File.open("/mnt/w/held.txt", "w"); $w.write("x" * 1000); $w.flush
$d = File.open("/tmp/deleted.bin", "w"); $d.write("z" * 300_000); $d.flush; File.delete("/tmp/deleted.bin")
$r = File.open("/mnt/w/seed.txt"); $dir = Dir.open("/mnt/w"); $dir.read; 1`, nil},
	{"memory written many ways", `m = "ATTACK" + "MARK"; $m = m * 100_000; $u = Random.urandom(1 << 20)
File.write("/tmp/big.txt", m * 200_000); $rd = File.read("/tmp/big.txt"); $t = echo(m * 10_000)
$h = "y" * (20 << 20); $h[-10, 10] = m; $clk = 200.times.map { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
$mark = m; srand(42); 1`, nil},
	{"rescued deep recursion", `def deep(n) = deep(n + 1); begin; deep(0); rescue SystemStackError; $deep = 1; end
def deep2(n) = (begin; deep2(n + 1); ensure; $x = n; end); begin; deep2(0); rescue SystemStackError; $deep2 = 1; end
def deep3(n) = [n, deep3(n + 1)].inspect; (begin; deep3(0); rescue SystemStackError; end); "ATTACK" + "MARK" + "after"`, nil},
	{"exit with handlers", `at_exit { puts "AT-EXIT-LEAK" }; $pending = "ATTACK" + "MARK"; exit 3`, nil},
	{"raise in ensure", `$x = "ATTACK" + "MARK"; begin; raise "a"; ensure; raise "b"; end`, nil},
	{"uncaught throw", `$x = "ATTACK" + "MARK"; throw :nowhere`, nil},
	{"timeout rescued", `require "timeout"; $x = "ATTACK" + "MARK"; Timeout.timeout(0.01) { loop { } } rescue nil
Timeout.timeout(5) { $y = 1 }; 1`, nil},
	{"big value refused", `$x = "ATTACK" + "MARK"; "v" * (2 << 20)`, nil},
}

// rewindRuntime is a Runtime with no pool (every eval takes an idle VM
// if there is one), a tool, a writable mount and a scratch base of the
// test's own.
func rewindRuntime(t *testing.T, disable bool) (*glovebox.Runtime, string, string) {
	t.Helper()
	base := t.TempDir()
	mnt, scratch := filepath.Join(base, "w"), filepath.Join(base, "scratch")
	must(t, os.MkdirAll(mnt, 0o755))
	must(t, os.MkdirAll(scratch, 0o755))
	must(t, os.WriteFile(filepath.Join(mnt, "seed.txt"), []byte("seed"), 0o644))
	var ts glovebox.Toolset
	must(t, ts.Func("echo", func(s string) string { return s }))
	r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, Tools: &ts, ScratchDir: scratch,
		DisableVMReuse: disable, Mounts: []glovebox.Mount{{HostPath: mnt, GuestPath: "/mnt/w", Writable: true}},
		Limits: glovebox.Limits{Timeout: 10 * time.Second, Value: 1 << 20, FileWrite: 64 << 20, FileCreates: 100}})
	must(t, err)
	t.Cleanup(func() { r.Close() })
	return r, mnt, scratch
}

// probeValue runs the probe and returns its value, checking its output.
func probeValue(t *testing.T, r *glovebox.Runtime, after string, opts ...glovebox.EvalOption) []any {
	t.Helper()
	res, err := r.EvalWith(context.Background(), "$mono_limit = 0\n"+rewindProbe, opts...)
	must(t, err)
	if res.Status != glovebox.StatusOK {
		t.Fatalf("after %s: probe: %s %+v", after, res.Status, res.Error)
	}
	if res.Stdout != "probe-out\n" || res.Stderr != "" {
		t.Fatalf("after %s: the probe printed %q / %q: the attacker's code ran in it", after, res.Stdout, res.Stderr)
	}
	return res.Value.([]any)
}

// heldFiles lists the process's descriptors for anything but directories
// under the given host paths, and deleted files anywhere under them.
func heldFiles(t *testing.T, roots ...string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	var out []string
	for _, e := range ents {
		p := "/proc/self/fd/" + e.Name()
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		for _, root := range roots {
			if !strings.HasPrefix(target, root) {
				continue
			}
			if st, err := os.Stat(p); err == nil && st.IsDir() && !strings.HasSuffix(target, "(deleted)") {
				continue
			}
			out = append(out, target)
		}
	}
	return out
}

// TestAttackRewindLeavesNothing: after each attack, the probe in the
// rewound VM sees what it sees in a new VM, prints only its own line,
// and no descriptor of the attacker's files is held by the idle VM.
func TestAttackRewindLeavesNothing(t *testing.T) {
	fresh, _, _ := rewindRuntime(t, true)
	want := probeValue(t, fresh, "nothing")
	if again := probeValue(t, fresh, "nothing"); !reflect.DeepEqual(want, again) {
		t.Fatalf("the probe is not deterministic in new VMs:\n%v\n%v", want, again)
	}
	r, mnt, scratch := rewindRuntime(t, false)
	probeValue(t, r, "nothing") // leaves a VM idle
	st0 := r.Stats()
	rewound := 0
	for _, a := range rewindAttacks {
		before := r.Stats().VMsRewound
		res, err := r.EvalWith(context.Background(), a.code, a.opts...)
		must(t, err)
		if res.Status != glovebox.StatusOK && res.Status != glovebox.StatusError {
			t.Fatalf("%s: %s %+v", a.name, res.Status, res.Error)
		}
		if r.Stats().VMsRewound > before {
			rewound++
		}
		if held := heldFiles(t, mnt, scratch); len(held) > 0 {
			t.Fatalf("after %s, with its VM idle, the process holds %v", a.name, held)
		}
		reused := r.Stats().VMsReused
		got := probeValue(t, r, a.name)
		if r.Stats().VMsReused == reused && r.Stats().VMsRewound > before {
			t.Fatalf("after %s: the probe did not run in the rewound VM", a.name)
		}
		// The mount is the host's: what the attacker left there stays.
		got[21], want[21] = nil, nil
		os.Remove(filepath.Join(mnt, "held.txt"))
		if !reflect.DeepEqual(got, want) {
			for i := range want {
				if i < len(got) && !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("after %s: probe item %d is %#v in the rewound VM, %#v in a new one", a.name, i, got[i], want[i])
				}
			}
			t.FailNow()
		}
	}
	st1 := r.Stats()
	t.Logf("%d of %d attacks rewound; %d rewound, %d reused", rewound, len(rewindAttacks), st1.VMsRewound-st0.VMsRewound, st1.VMsReused-st0.VMsReused)
	if rewound < len(rewindAttacks)-2 {
		t.Fatalf("only %d of %d attacker VMs were rewound: the test proves little", rewound, len(rewindAttacks))
	}
}

// TestAttackRewindProbeHasTeeth: the probe notices each attack when it
// runs after it in the same VM without a rewind (a session), so that
// TestAttackRewindLeavesNothing passing means something.
func TestAttackRewindProbeHasTeeth(t *testing.T) {
	fresh, _, _ := rewindRuntime(t, true)
	want := probeValue(t, fresh, "nothing")
	want[21] = nil
	r, mnt, _ := rewindRuntime(t, false)
	for _, a := range rewindAttacks {
		s, err := r.NewSession()
		must(t, err)
		res, err := s.EvalWith(context.Background(), a.code, a.opts...)
		must(t, err)
		t.Logf("%s: %s %v", a.name, res.Status, res.Error)
		p, err := s.Eval(context.Background(), "$mono_limit = 0\n"+rewindProbe)
		must(t, err)
		s.Close()
		os.Remove(filepath.Join(mnt, "held.txt"))
		if p.Status == glovebox.StatusOK && p.Stdout == "probe-out\n" && p.Stderr == "" {
			got := p.Value.([]any)
			got[21] = nil
			if reflect.DeepEqual(got, want) {
				t.Errorf("%s: the probe sees nothing of it even in the same VM", a.name)
			}
		}
	}
}

// TestAttackRewindSessionToPlainEval: a session's VM goes back to the
// pool's idle list when the session closes; the plain eval that takes it
// sees none of the session's state.
func TestAttackRewindSessionToPlainEval(t *testing.T) {
	fresh, _, _ := rewindRuntime(t, true)
	want := probeValue(t, fresh, "nothing")
	want[21] = nil
	r, mnt, scratch := rewindRuntime(t, false)
	for i, a := range rewindAttacks {
		s, err := r.NewSession()
		must(t, err)
		for _, code := range []string{a.code, `$second = "ATTACK" + "MARK"; 1`} {
			res, err := s.EvalWith(context.Background(), code, a.opts...)
			must(t, err)
			if res.SessionReset {
				t.Fatalf("%s: the session was reset: %s %+v", a.name, res.Status, res.Error)
			}
		}
		st := r.Stats()
		s.Close()
		if r.Stats().VMsRewound == st.VMsRewound {
			t.Fatalf("%s: the session's VM was not rewound when it closed", a.name)
		}
		if held := heldFiles(t, mnt, scratch); len(held) > 0 {
			t.Fatalf("after session %s closed, the process holds %v", a.name, held)
		}
		var got []any
		if i%2 == 0 {
			got = probeValue(t, r, "session "+a.name)
		} else { // a new session's first eval takes it too
			s2, err := r.NewSession()
			must(t, err)
			p, err := s2.Eval(context.Background(), "$mono_limit = 0\n"+rewindProbe)
			must(t, err)
			s2.Close()
			if p.Status != glovebox.StatusOK || p.Stdout != "probe-out\n" || p.Stderr != "" {
				t.Fatalf("after session %s: the next session's probe: %s %+v %q %q", a.name, p.Status, p.Error, p.Stdout, p.Stderr)
			}
			got = p.Value.([]any)
		}
		if r.Stats().VMsReused == st.VMsReused {
			t.Fatalf("%s: the probe did not take the session's VM", a.name)
		}
		got[21] = nil
		os.Remove(filepath.Join(mnt, "held.txt"))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after session %s: the probe saw %v, want %v", a.name, got, want)
		}
	}
}

// TestAttackRewindRefusedAfterAbandonedToolCall: a VM whose tool call
// outlived the eval (the tool ignores its context) is never rewound, even
// though the tool returns and Ruby then ends cleanly; the next eval runs
// in a new VM and sees nothing.
func TestAttackRewindRefusedAfterAbandonedToolCall(t *testing.T) {
	release := make(chan struct{})
	returned := make(chan struct{}, 2)
	var ts glovebox.Toolset
	must(t, ts.Func("stuck", func() string {
		<-release
		select {
		case returned <- struct{}{}:
		default:
		}
		return "late"
	}))
	r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, Tools: &ts,
		Limits: glovebox.Limits{Timeout: 50 * time.Millisecond}})
	must(t, err)
	defer r.Close()
	st := r.Stats()
	res, err := r.Eval(context.Background(), `$x = "ATTACK" + "MARK"; stuck; $y = stuck; 1`)
	must(t, err)
	wantStatus(t, res, glovebox.StatusTimeout)
	close(release)
	<-returned
	// The VM runs on after the tool returns (a second call, if the host
	// lets it make one, returns at once) and ends; give it time to.
	select {
	case <-returned:
	case <-time.After(time.Second):
	}
	time.Sleep(200 * time.Millisecond)
	if n := r.Stats().VMsRewound - st.VMsRewound; n != 0 {
		t.Fatalf("%d VMs rewound after an abandoned tool call", n)
	}
	res = eval(t, r, `m = "ATTACK" + "MARK"; [defined?($x), defined?($y), ObjectSpace.each_object(String).count { |s| !s.equal?(m) && s.include?(m) }]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !reflect.DeepEqual(res.Value, []any{nil, nil, int64(0)}) {
		t.Fatalf("the next eval saw %v", res.Value)
	}
	if r.Stats().VMsReused != st.VMsReused {
		t.Fatal("the next eval took a rewound VM")
	}
}

// TestAttackRewindRefusals: an eval that grew its memory, or ended in a
// trap or a host stop even after rescuing, leaves no VM to reuse.
func TestAttackRewindRefusals(t *testing.T) {
	r, _, _ := rewindRuntime(t, false)
	for _, c := range []struct {
		name, code string
		lim        glovebox.Limits
	}{
		{"grown and kept", `$big = "ATTACK" + "MARK" + "g" * (40 << 20); 1`, glovebox.Limits{}},
		{"memory limit rescued", `begin; a = []; loop { a << "m" * (8 << 20) }; rescue NoMemoryError; a = nil; end; $x = "ATTACK" + "MARK"; 1`,
			glovebox.Limits{Memory: 420 << 20}},
		{"exit!", `$x = "ATTACK" + "MARK"; exit!(0)`, glovebox.Limits{}},
		{"timeout in rescue", `$x = "ATTACK" + "MARK"; begin; loop {}; rescue Exception; loop {}; end`, glovebox.Limits{Timeout: 100 * time.Millisecond}},
		{"wasm stack", `$x = "ATTACK" + "MARK"; def f(n) = [n, f(n + 1)].hash; f(0)`, glovebox.Limits{}},
	} {
		rr := r
		if c.lim != (glovebox.Limits{}) {
			var err error
			rr, err = r.WithLimits(c.lim)
			must(t, err)
		}
		st := r.Stats()
		res, err := rr.Eval(context.Background(), c.code)
		must(t, err)
		t.Logf("%s: %s %v", c.name, res.Status, res.Error)
		if (c.name == "grown and kept") != (res.Status == glovebox.StatusOK) {
			t.Fatalf("%s ended ok", c.name)
		}
		if n := r.Stats().VMsRewound - st.VMsRewound; n != 0 && c.name != "wasm stack" {
			t.Fatalf("%s: %d VMs rewound", c.name, n)
		}
		res = eval(t, r, `m = "ATTACK" + "MARK"; [$x, $big, ObjectSpace.each_object(String).count { |s| !s.equal?(m) && s.include?(m) }]`)
		if res.Status != glovebox.StatusOK || !reflect.DeepEqual(res.Value, []any{nil, nil, int64(0)}) {
			t.Fatalf("after %s the next eval saw %s %v %v", c.name, res.Status, res.Value, res.Error)
		}
	}
}

// TestAttackRewindConcurrentEvals: evals racing on one Runtime, with and
// without tools (the VM goroutine path), each leaving a marker of its
// own, never see another's marker, and none ends other than ok.
func TestAttackRewindConcurrentEvals(t *testing.T) {
	r, _, _ := rewindRuntime(t, false)
	plain, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1})
	must(t, err)
	defer plain.Close()
	st := r.Stats()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := r
			if w%2 == 1 {
				rt = plain
			}
			for i := range 15 {
				tool := ""
				if w%2 == 0 && i%2 == 0 {
					tool = `echo("x"); `
				}
				code := fmt.Sprintf(`%sm = "MARK" + "ER"; seen = ObjectSpace.each_object(String).count { |s| !s.equal?(m) && s.include?(m) }
$mine = m + "-%d-%d" + "x" * 10_000; File.write("/tmp/m", $mine); out = [seen, defined?($mine_prev), Dir.children("/tmp") - ["m"]]`, tool, w, i)
				res, err := rt.Eval(context.Background(), code+"\n$mine_prev = 1\nout")
				if err != nil {
					errs <- err
					return
				}
				if res.Status != glovebox.StatusOK {
					errs <- fmt.Errorf("worker %d eval %d: %s %+v", w, i, res.Status, res.Error)
					return
				}
				if v := res.Value.([]any); v[0] != int64(0) || v[1] != nil || len(v[2].([]any)) != 0 {
					errs <- fmt.Errorf("worker %d eval %d saw another eval's state: %v", w, i, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if r.Stats().VMsReused == st.VMsReused {
		t.Fatal("no VM was reused")
	}
}

// TestAttackRewindCloseLeavesNothing: closing a Runtime whose idle VMs
// held files, directories and tool state leaves no descriptor, scratch
// directory or goroutine behind.
func TestAttackRewindCloseLeavesNothing(t *testing.T) {
	countFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		must(t, err)
		return len(ents)
	}
	// Warm up what a first Runtime makes once per process (the shared
	// engine is rt's; a Runtime with mounts builds its layout's snapshot).
	r0, _, _ := rewindRuntime(t, false)
	eval(t, r0, "1")
	r0.Close()
	time.Sleep(50 * time.Millisecond)
	fds0, g0 := countFDs(), runtime.NumGoroutine()
	r, mnt, scratch := rewindRuntime(t, false)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				res, err := r.Eval(context.Background(), fmt.Sprintf(`$f = File.open("/mnt/w/k%d.txt", "w"); $d = Dir.open("/tmp")
$s = File.open("/tmp/s.txt", "w"); $s.write("s" * 100_000); $s.flush; echo("x"); 1`, w))
				if err != nil || res.Status != glovebox.StatusOK {
					t.Errorf("%v %+v", err, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	if r.Stats().VMsRewound == 0 {
		t.Fatal("nothing was rewound")
	}
	r.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left, _ := os.ReadDir(privateScratch(scratch))
		fds, g := countFDs(), runtime.NumGoroutine()
		held := heldFiles(t, mnt, scratch)
		if len(left) == 0 && fds <= fds0 && g <= g0 && len(held) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close: %d scratch directories, %d descriptors (%d before), %d goroutines (%d before), holding %v",
				len(left), fds, fds0, g, g0, held)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttackRewindMountReplacedWhileIdle: a mount's host directory
// replaced while a VM that used it waits rewound: the next eval in that
// VM sees the new directory, and writes there, not into the old one.
func TestAttackRewindMountReplacedWhileIdle(t *testing.T) {
	r, mnt, _ := rewindRuntime(t, false)
	res := eval(t, r, `$f = File.open("/mnt/w/old.txt", "w"); $f.write("old"); $f.flush; Dir.children("/mnt/w").sort`)
	wantStatus(t, res, glovebox.StatusOK)
	moved := mnt + ".old"
	must(t, os.Rename(mnt, moved))
	must(t, os.Mkdir(mnt, 0o755))
	must(t, os.WriteFile(filepath.Join(mnt, "new.txt"), []byte("new"), 0o644))
	st := r.Stats()
	res = eval(t, r, `File.write("/mnt/w/written.txt", "w"); [Dir.children("/mnt/w").sort, File.read("/mnt/w/new.txt")]`)
	wantStatus(t, res, glovebox.StatusOK)
	if r.Stats().VMsReused == st.VMsReused {
		t.Fatal("the eval did not take the rewound VM")
	}
	if !reflect.DeepEqual(res.Value, []any{[]any{"new.txt", "written.txt"}, "new"}) {
		t.Fatalf("the rewound VM saw %v", res.Value)
	}
	if _, err := os.Stat(filepath.Join(moved, "written.txt")); err == nil {
		t.Fatal("the rewound VM wrote into the replaced directory")
	}
}

// TestAttackRewindNoDescriptorCreep: a VM rewound again and again, each
// eval opening files, directories and preopens anew, holds no more host
// descriptors after 60 evals than after 10.
func TestAttackRewindNoDescriptorCreep(t *testing.T) {
	r, _, _ := rewindRuntime(t, false)
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		must(t, err)
		return len(ents)
	}
	run := func(n int) {
		for i := range n {
			res := eval(t, r, fmt.Sprintf(`$a = File.open("/mnt/w/c%d.txt", "w"); $b = Dir.open("/tmp"); $c = File.open("/tmp/x", "w")
$d = IO.for_fd(IO.sysopen("/mnt/w/seed.txt")); $e = File.open("/mnt/w/seed.txt"); $e.close; echo("x"); 1`, i%3))
			wantStatus(t, res, glovebox.StatusOK)
		}
	}
	st := r.Stats()
	run(10)
	before := count()
	run(50)
	if after := count(); after > before {
		t.Fatalf("%d descriptors after 10 evals, %d after 60", before, after)
	}
	if n := r.Stats().VMsReused - st.VMsReused; n < 55 {
		t.Fatalf("only %d of 60 evals took a rewound VM", n)
	}
}

// TestAttackScratchTimesTellNothing: a VM's scratch directory is wiped
// and kept for the next eval (the same VM rewound, or another VM taking
// the recycled directory), so its times used to show the next eval when
// the last one changed it (its last file, or the wipe after it). Each
// eval sees /tmp's times no earlier than its own start.
func TestAttackScratchTimesTellNothing(t *testing.T) {
	for _, disable := range []bool{false, true} {
		r, _, _ := rewindRuntime(t, disable)
		eval(t, r, `File.write("/tmp/a", "x"); Dir.mkdir("/tmp/d"); 1`)
		before := float64(time.Now().UnixNano()) / 1e9
		res := eval(t, r, `s = File.stat("/tmp"); d = File.open("/tmp") { |f| f.stat }; [s.atime, s.mtime, s.ctime, d.atime, d.mtime, d.ctime].map(&:to_f).min`)
		wantStatus(t, res, glovebox.StatusOK)
		if seen := res.Value.(float64); seen < before {
			t.Fatalf("reuse disabled %v: the eval saw /tmp changed at %.6f, %.3f s before it started: the time of the last eval's work", disable, seen, before-seen)
		}
	}
}

// A VM waiting in a pool does not tell its eval how long it waited.
func TestClockStandsStillInPool(t *testing.T) {
	r := newRuntime(t, glovebox.Config{PoolSize: 1})
	eval(t, r, "1")
	time.Sleep(1500 * time.Millisecond) // the pooled VM waits
	res := eval(t, r, `Process.clock_gettime(Process::CLOCK_MONOTONIC)`)
	a := res.Value.(float64)
	time.Sleep(1500 * time.Millisecond)
	res = eval(t, r, `Process.clock_gettime(Process::CLOCK_MONOTONIC)`)
	if b := res.Value.(float64); b-a > 0.5 || a-b > 0.5 {
		t.Fatalf("monotonic clock read %v then %v across 1.5 s of pool waiting", a, b)
	}
}

// Two evals never see each other's globals, constants, methods, monkey
// patches, files or random sequence.
func TestEvalsShareNoState(t *testing.T) {
	set := `$leak = 1; LEAK = 2; def leaked = 3; class String; def shout = upcase; end
		@ivar = 4; srand(42); File.write("/tmp/x", "y") rescue nil; Glovebox::MAX_DEPTH.then { }; :set`
	wantStatus(t, eval(t, rt, set), glovebox.StatusOK)
	res := eval(t, rt, `[$leak, defined?(LEAK), respond_to?(:leaked, true), "a".respond_to?(:shout), @ivar, File.exist?("/tmp/x")]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{nil, nil, false, false, nil, false}) {
		t.Fatalf("state leaked between evals: %v", res.Value)
	}
	// Each VM has its own random seed.
	seen := map[string]bool{}
	for range 5 {
		res := eval(t, rt, `require "securerandom"; [rand(2**62), Random.new_seed % 2**62, SecureRandom.hex(8)].inspect`)
		wantStatus(t, res, glovebox.StatusOK)
		s := res.Value.(string)
		if seen[s] {
			t.Fatalf("two VMs produced the same random values %s", s)
		}
		seen[s] = true
	}
}

// 200 consecutive evals that each trap leave the process healthy: no
// leaked goroutines, memory back near its baseline.
func TestTrappingEvalsLeakNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow")
	}
	r := withLimits(t, glovebox.Limits{Fuel: 2_000_000})
	codes := []string{"loop {}", "exit!(1)", "def f = f; f", `Glovebox.send(:__send, "x", "")`}
	runOnce := func(n int) {
		for i := range n {
			res := eval(t, r, codes[i%len(codes)])
			if res.Status == glovebox.StatusOK {
				t.Fatalf("%s ended ok", codes[i%len(codes)])
			}
		}
	}
	runOnce(20) // warm up pools and caches
	time.Sleep(200 * time.Millisecond)
	g0, rss0 := runtime.NumGoroutine(), rssBytes(t)
	runOnce(200)
	time.Sleep(500 * time.Millisecond) // let the closer free the VMs
	g1, rss1 := runtime.NumGoroutine(), rssBytes(t)
	if g1 > g0+2 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	if rss1 > rss0+64<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB over 200 trapping evals", rss0>>20, rss1>>20)
	}
	t.Logf("goroutines %d -> %d, RSS %d -> %d MiB", g0, g1, rss0>>20, rss1>>20)
}
