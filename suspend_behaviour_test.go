package glovebox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

func mustContinue(t testing.TB, r *glovebox.Runtime, state []byte, a glovebox.Answer, opts ...glovebox.EvalOption) *glovebox.Result {
	t.Helper()
	res, err := r.Continue(context.Background(), state, a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestSuspendByToolAndApprover: a tool and the Approver can each suspend
// a call; the answers — a value, an error the guest rescues, a denial —
// reach the guest as a tool's would, and the transcript says so.
func TestSuspendByToolAndApprover(t *testing.T) {
	var ts glovebox.Toolset
	ts.Add("job", func(ctx context.Context, a glovebox.Args) (any, error) {
		time.Sleep(2 * time.Millisecond)
		return nil, glovebox.SuspendCall("job 7 runs")
	})
	ts.Add("transfer", func(ctx context.Context, a glovebox.Args) (any, error) { return "ran", nil })
	ts.RequireApproval("transfer")
	r, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1, StateKeys: testKeyring(t),
		Hooks: glovebox.Hooks{Approver: func(ctx context.Context, tool string, a glovebox.Args) error {
			return fmt.Errorf("a person decides: %w", glovebox.ErrSuspend)
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	code := `out = []
out << job(1)
begin
  out << job(2)
rescue Glovebox::Late => e
  out << "rescued #{e.message}"
end
begin
  transfer(5)
rescue Glovebox::ToolDenied => e
  out << "denied: #{e.message}"
end
out << transfer(6)
out`
	res := eval(t, r, code)
	wantStatus(t, res, glovebox.StatusSuspended)
	if p := res.Pending; p.Name != "job" || p.Reason != "job 7 runs" || p.Approval || len(p.ID) != 32 || p.Args.Positional[0] != int64(1) {
		t.Fatalf("pending %+v", p)
	}
	if res.Error.Class != "Glovebox::Suspended" {
		t.Fatalf("error %+v", res.Error)
	}
	j, _ := res.MarshalJSON()
	if want := `"pending":{"id":"` + res.Pending.ID + `","name":"job","args":[1],"kwargs":{},"reason":"job 7 runs","approval":false}`; !bytes.Contains(j, []byte(want)) {
		t.Fatalf("JSON %s lacks %s", j, want)
	}
	res = mustContinue(t, r, res.State, glovebox.Answer{Value: "done"})
	wantStatus(t, res, glovebox.StatusSuspended)
	res = mustContinue(t, r, res.State, glovebox.Answer{Err: &glovebox.ToolError{Class: "Late", Message: "too slow"}})
	wantStatus(t, res, glovebox.StatusSuspended)
	if p := res.Pending; p.Name != "transfer" || !p.Approval || p.Reason != "suspended" {
		t.Fatalf("pending %+v", p)
	}
	res = mustContinue(t, r, res.State, glovebox.Answer{Denied: true, Reason: "the operator said no"})
	wantStatus(t, res, glovebox.StatusSuspended)
	res = mustContinue(t, r, res.State, glovebox.Answer{Value: "approved and ran"})
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{"done", "rescued too slow", "denied: the operator said no", "approved and ran"}
	if fmt.Sprint(res.Value) != fmt.Sprint(want) {
		t.Fatalf("value %v, want %v", res.Value, want)
	}
	calls := res.ToolCalls
	if len(calls) != 4 || calls[1].Error != "too slow" || calls[2].Approval != "denied" || calls[3].Approval != "approved" ||
		calls[3].Result != "approved and ran" || calls[0].Duration < 2*time.Millisecond {
		t.Fatalf("transcript %+v", calls)
	}
}

// TestSuspendRefused: without StateKeys, or with a writable mount, a
// suspend request raises Glovebox::ToolError saying why, and
// Session.Suspend fails with ErrNotSuspendable.
func TestSuspendRefused(t *testing.T) {
	var ts glovebox.Toolset
	ts.Add("wait", func(context.Context, glovebox.Args) (any, error) { return nil, glovebox.ErrSuspend })
	ctx := context.Background()
	for _, c := range []struct {
		cfg  glovebox.Config
		want string
	}{
		{glovebox.Config{}, "no StateKeys"},
		{glovebox.Config{StateKeys: testKeyring(t), Mounts: []glovebox.Mount{{HostPath: t.TempDir(), GuestPath: "/out", Writable: true}}}, "/out is writable"},
	} {
		c.cfg.Tools, c.cfg.PoolSize = &ts, -1
		r, err := glovebox.New(ctx, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		res := eval(t, r, `begin; wait; rescue Glovebox::ToolError => e; e.message; end`)
		if res.Status != glovebox.StatusOK || !strings.Contains(fmt.Sprint(res.Value), "cannot suspend this call: ") ||
			!strings.Contains(fmt.Sprint(res.Value), c.want) {
			t.Fatalf("%+v %v", res, res.Value)
		}
		s, _ := r.NewSession()
		_, err = s.Suspend(ctx)
		if c.want == "no StateKeys" && !errors.Is(err, glovebox.ErrNotSuspendable) {
			t.Fatalf("Suspend without keys: %v", err)
		}
		s.Close()
		r.Close()
	}
}

// TestSessionPausedInCall: a session's eval paused in a call pauses the
// session: it refuses evals until answered, keeps what the eval did
// before the pause, and can be resumed elsewhere from the state.
func TestSessionPausedInCall(t *testing.T) {
	ctx := context.Background()
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	s, _ := r.NewSession()
	defer s.Close()
	if _, err := s.Eval(ctx, `base = 10; def tw(x) = x * 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Continue(ctx, glovebox.Answer{}); !errors.Is(err, glovebox.ErrSessionPaused) {
		t.Fatalf("Continue on a session that is not paused: %v", err)
	}
	res, err := s.Eval(ctx, `a = tw(base) + double(1); b = a + double(2); [a, b]`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusSuspended)
	if res.SessionReset || s.Pending() == nil || s.Pending().Name != "double" {
		t.Fatalf("reset %v pending %+v", res.SessionReset, s.Pending())
	}
	if _, err := s.Eval(ctx, `1`); !errors.Is(err, glovebox.ErrSessionPaused) {
		t.Fatalf("Eval on a paused session: %v", err)
	}
	if _, err := s.Suspend(ctx); !errors.Is(err, glovebox.ErrSessionPaused) {
		t.Fatalf("Suspend on a paused session: %v", err)
	}
	res, err = s.Continue(ctx, glovebox.Answer{Value: 2})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusSuspended)
	// The second pause goes to another Runtime.
	r2 := newCorpusRuntime(t, true, glovebox.Config{})
	defer r2.Close()
	s2, err := r2.ResumeSession(ctx, res.State)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if p := s2.Pending(); p == nil || p.Args.Positional[0] != int64(2) || p.ID != res.Pending.ID {
		t.Fatalf("pending %+v", p)
	}
	res, err = s2.Continue(ctx, glovebox.Answer{Value: 4})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	if fmt.Sprint(res.Value) != "[22 26]" || s2.Pending() != nil {
		t.Fatalf("value %v pending %v", res.Value, s2.Pending())
	}
	res, _ = s2.Eval(ctx, `[base, a, b, tw(1)]`)
	if fmt.Sprint(res.Value) != "[10 22 26 2]" {
		t.Fatalf("after the pause: %v %+v", res.Value, res.Error)
	}
}

// TestSessionSuspendResume: a suspended idle session resumes in another
// Runtime with everything it had — variables, globals, methods, classes,
// constants, loaded libraries, a large heap, the random generator — and
// goes on exactly as the same session would have without the pause. It
// holds with VM reuse disabled too (the state is then taken against the
// boot snapshot).
func TestSessionSuspendResume(t *testing.T) {
	ctx := context.Background()
	const setup = `require "set"; require "json"
x = 41; $g = [1, "two"]; LIMIT = 3
def m(y) = y * LIMIT
class Acc; def initialize = @n = 0; def add(v) = @n += v; end
$acc = Acc.new; $acc.add(5)
$heap = "h" * (1 << 20)
srand(1234); rand(10)
S = Set[1, 2]
:ready`
	const probe = `[x, $g, m(2), $acc.add(1), $heap.size, rand(1 << 30), S.include?(2), JSON.generate({a: 1}), $LOADED_FEATURES.size]`
	// Each Runtime closes before the next opens, so the engine is freed
	// and opened again (its snapshot loaded again): the state must not
	// depend on the order a load lists the snapshot's globals in.
	for _, noReuse := range []bool{false, true} {
		cfg := glovebox.Config{DisableVMReuse: noReuse}
		r := newCorpusRuntime(t, false, cfg)
		straight, _ := r.NewSession()
		eval1, _ := straight.Eval(ctx, setup)
		wantStatus(t, eval1, glovebox.StatusOK)
		want, _ := straight.Eval(ctx, probe)
		straight.Close()

		s, _ := r.NewSession()
		s.Eval(ctx, setup)
		state, err := s.Suspend(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Eval(ctx, `1`); !errors.Is(err, glovebox.ErrSessionClosed) {
			t.Fatalf("a suspended session still runs: %v", err)
		}
		r.Close()
		r2 := newCorpusRuntime(t, false, cfg)
		s2, err := r2.ResumeSession(ctx, state)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := s2.Eval(ctx, probe)
		if comparableValue(got) != comparableValue(want) {
			t.Fatalf("noReuse=%v: resumed %v (%+v), straight %v", noReuse, got.Value, got.Error, want.Value)
		}
		s2.Close()
		r2.Close()
	}
}

func comparableValue(res *glovebox.Result) string {
	b, _ := res.MarshalJSON()
	i := bytes.Index(b, []byte(`"value":`))
	j := bytes.Index(b, []byte(`,"stdout"`))
	return string(b[i:j]) + res.Stdout + res.Stderr + string(res.Status)
}

// TestSessionSuspendOpenFile: a session whose guest keeps a file open is
// not suspended (ErrNotSuspendable says why) and goes on; once the file
// is closed it is.
func TestSessionSuspendOpenFile(t *testing.T) {
	ctx := context.Background()
	r := newCorpusRuntime(t, false, glovebox.Config{})
	defer r.Close()
	s, _ := r.NewSession()
	defer s.Close()
	s.Eval(ctx, `$f = File.open("/tmp/keep.txt", "w"); $f.write("x"); v = 5`)
	_, err := s.Suspend(ctx)
	if !errors.Is(err, glovebox.ErrNotSuspendable) || !strings.Contains(err.Error(), "files open") {
		t.Fatalf("Suspend with a file open: %v", err)
	}
	res, _ := s.Eval(ctx, `$f.close; v + 1`)
	if res.Value != int64(6) {
		t.Fatalf("after the refusal: %+v", res)
	}
	if _, err := s.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSuspendOutputStreamsOnce: WithOutput on a continued eval receives
// only what the eval writes after its pause; the Result has all of it.
func TestSuspendOutputStreamsOnce(t *testing.T) {
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	var before, after, errs bytes.Buffer
	res, err := r.EvalWith(context.Background(), `puts "one"; $stderr.print "e1"; double(1); puts "two"; $stderr.print "e2"; :x`, glovebox.WithOutput(&before, nil))
	if err != nil {
		t.Fatal(err)
	}
	res = mustContinue(t, r, res.State, glovebox.Answer{Value: 2}, glovebox.WithOutput(&after, &errs))
	if res.Stdout != "one\ntwo\n" || res.Stderr != "e1e2" || before.String() != "one\n" || after.String() != "two\n" || errs.String() != "e2" {
		t.Fatalf("result %q %q, streamed %q then %q, stderr %q", res.Stdout, res.Stderr, before.String(), after.String(), errs.String())
	}
	if _, err := r.Continue(context.Background(), res.State, glovebox.Answer{}, glovebox.WithArgs("a")); err == nil {
		t.Fatal("input options were accepted")
	}
}

// TestSuspendHoldsNothing: a suspended session and a paused eval hold no
// VM, goroutine, descriptor or scratch directory in the process that
// made them.
func TestSuspendHoldsNothing(t *testing.T) {
	ctx := context.Background()
	scratch := t.TempDir()
	r := newCorpusRuntime(t, true, glovebox.Config{DisableVMReuse: true, ScratchDir: scratch})
	defer r.Close()
	count := func() (vms uint64, goroutines, fds, dirs int) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond) // let goroutines that are ending end
		ents, _ := os.ReadDir("/proc/self/fd")
		sub, _ := filepath.Glob(filepath.Join(scratch, "*", "*"))
		return r.Stats().VMsLive, runtime.NumGoroutine(), len(ents), len(sub)
	}
	// Warm the Runtime's caches (scratch directories are recycled).
	s, _ := r.NewSession()
	s.Eval(ctx, `1`)
	s.Close()
	eval(t, r, `2`)
	v0, g0, f0, d0 := count()
	var states [][]byte
	for i := range 5 {
		s, _ := r.NewSession()
		s.Eval(ctx, fmt.Sprintf(`$x = "%d" * 100_000; File.write("/tmp/f", "x")`, i))
		st, err := s.Suspend(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res := eval(t, r, `File.write("/tmp/g", "y"); f = File.open("/tmp/g"); double(1)`)
		wantStatus(t, res, glovebox.StatusSuspended)
		states = append(states, st, res.State)
		s2, _ := r.NewSession()
		s2.Eval(ctx, `y = double(2)`)
		if s2.Pending() == nil {
			t.Fatal("not paused")
		}
	}
	v1, g1, f1, d1 := count()
	if v1 > v0 || g1 > g0 || f1 > f0 || d1 > d0 {
		t.Fatalf("after 15 suspensions: VMs %d→%d, goroutines %d→%d, descriptors %d→%d, scratch directories %d→%d", v0, v1, g0, g1, f0, f1, d0, d1)
	}
	t.Logf("VMs %d, goroutines %d, descriptors %d, scratch directories %d, before and after", v1, g1, f1, d1)
}

// TestSessionSuspendGrownMemory: a session whose memory grew past the
// snapshot's resumes with the grown memory and what it holds.
func TestSessionSuspendGrownMemory(t *testing.T) {
	ctx := context.Background()
	r := newCorpusRuntime(t, false, glovebox.Config{})
	defer r.Close()
	st := idleState(t, r, `$big = "x" * (100 << 20); $big[-1] = "y"; $mark = "z" * 1000; 1`)
	t.Logf("state %d KiB", len(st)>>10)
	r2 := newCorpusRuntime(t, false, glovebox.Config{})
	defer r2.Close()
	s, err := r2.ResumeSession(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, _ := s.Eval(ctx, `[$big.size, $big[-2, 2], $mark.size, ("w" * (10 << 20)).size]`)
	if fmt.Sprint(res.Value) != "[104857600 xy 1000 10485760]" {
		t.Fatalf("%v %+v", res.Value, res.Error)
	}
}

// TestContinueApproved: Answer.Approved runs the pending tool in the
// Runtime that continues the eval (another one here, as in another
// process), with the approval and outcome in the transcript; a later
// call of the tool asks again.
func TestContinueApproved(t *testing.T) {
	keys := testKeyring(t)
	mk := func(ran *[]any) *glovebox.Runtime {
		var ts glovebox.Toolset
		ts.Add("change_plan", func(ctx context.Context, a glovebox.Args) (any, error) {
			*ran = append(*ran, a.Keyword["plan"])
			return "now " + a.Keyword["plan"].(string), nil
		})
		ts.RequireApproval("change_plan")
		r, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1, StateKeys: keys,
			Hooks: glovebox.Hooks{Approver: func(context.Context, string, glovebox.Args) error { return glovebox.SuspendCall("needs approval") }}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	var ranA, ranB []any
	a, b := mk(&ranA), mk(&ranB)
	res := eval(t, a, `[change_plan(plan: "pro"), change_plan(plan: "team")]`)
	wantStatus(t, res, glovebox.StatusSuspended)
	res = mustContinue(t, b, res.State, glovebox.Answer{Approved: true})
	wantStatus(t, res, glovebox.StatusSuspended)
	res = mustContinue(t, b, res.State, glovebox.Answer{Approved: true})
	wantStatus(t, res, glovebox.StatusOK)
	if fmt.Sprint(res.Value) != "[now pro now team]" || len(ranA) != 0 || fmt.Sprint(ranB) != "[pro team]" {
		t.Fatalf("value %v; ran in the first Runtime %v, in the second %v", res.Value, ranA, ranB)
	}
	for _, c := range res.ToolCalls {
		if c.Approval != "approved" || c.Outcome != glovebox.OutcomeOK {
			t.Fatalf("transcript %+v", res.ToolCalls)
		}
	}
}

// TestSessionHistoryReplayed: a session's eval paused in a call, after
// earlier evals that called tools, drew unseeded random numbers and wrote
// output, continues in another Runtime with all of them as they were —
// the earlier evals are replayed from their journals, not run again —
// also after more evals than a history holds (a new base is captured).
func TestSessionHistoryReplayed(t *testing.T) {
	ctx := context.Background()
	var suspendNow atomic.Bool
	var calls atomic.Int64
	cfg := glovebox.Config{Hooks: glovebox.Hooks{BeforeCall: func(context.Context, string, glovebox.Args) error {
		calls.Add(1)
		if suspendNow.Load() {
			return glovebox.ErrSuspend
		}
		return nil
	}}}
	keep := newCorpusRuntime(t, false, glovebox.Config{}) // see TestSessionSuspendResume
	defer keep.Close()
	for _, n := range []int{3, 70} {
		r := newCorpusRuntime(t, false, cfg)
		s, _ := r.NewSession()
		res, _ := s.Eval(ctx, `$r = rand(1 << 40); $a = double(21); puts $r; $log = [$a]`)
		drawn := strings.TrimSpace(res.Stdout)
		for i := range n {
			s.Eval(ctx, fmt.Sprintf(`$log << lookup("a") + "%d"`, i))
		}
		suspendNow.Store(true)
		res, _ = s.Eval(ctx, `x = double($a); $log << x; [x, $log.size]`)
		suspendNow.Store(false)
		wantStatus(t, res, glovebox.StatusSuspended)
		s.Close()
		r.Close()
		before := calls.Load()
		r2 := newCorpusRuntime(t, false, cfg)
		s2, err := r2.ResumeSession(ctx, res.State)
		if err != nil {
			t.Fatal(err)
		}
		res, err = s2.Continue(ctx, glovebox.Answer{Value: 84})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(res.Value) != fmt.Sprint([]any{int64(84), int64(n + 2)}) {
			t.Fatalf("n=%d: %v %+v", n, res.Value, res.Error)
		}
		if calls.Load() != before {
			t.Fatalf("n=%d: the replay called tools again", n)
		}
		res, _ = s2.Eval(ctx, `[$r.to_s, $a, $log.first, $log[-2]]`)
		if fmt.Sprint(res.Value) != fmt.Sprint([]any{drawn, int64(42), int64(42), fmt.Sprintf("alpha%d", n-1)}) {
			t.Fatalf("n=%d: after the pause %v %+v", n, res.Value, res.Error)
		}
		s2.Close()
		r2.Close()
	}
}

// TestSessionContinueConcurrent: two Continues of one paused session at
// once (a Session is safe for concurrent use) answer its call once: one
// runs the approved tool, the other fails with ErrSessionPaused, and the
// session goes on from the one that ran.
func TestSessionContinueConcurrent(t *testing.T) {
	ctx := context.Background()
	var ran atomic.Int32
	var ts glovebox.Toolset
	if err := ts.Func("charge", func(n int) int { ran.Add(1); return n }); err != nil {
		t.Fatal(err)
	}
	hooks := glovebox.Hooks{BeforeCall: func(context.Context, string, glovebox.Args) error { return glovebox.SuspendCall("a person decides") }}
	r := newRuntime(t, glovebox.Config{Tools: &ts, StateKeys: testKeyring(t), PoolSize: -1, ScratchDir: ownScratch(t), Hooks: hooks})
	for round := 0; round < 20; round++ {
		s, _ := r.NewSession()
		res, err := s.Eval(ctx, `charge(7) + 1`)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, glovebox.StatusSuspended)
		before := ran.Load()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		results := make([]*glovebox.Result, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = s.Continue(ctx, glovebox.Answer{Approved: true})
			}()
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
				wantStatus(t, results[i], glovebox.StatusOK)
			case !errors.Is(err, glovebox.ErrSessionPaused):
				t.Errorf("round %d: the other Continue: %v, want ErrSessionPaused", round, err)
			}
		}
		if n := ran.Load() - before; ok != 1 || n != 1 {
			t.Fatalf("round %d: %d Continues succeeded and the approved tool ran %d times, want 1 and 1 (%v)", round, ok, n, errs)
		}
		if res, err := s.Eval(ctx, `2`); err != nil || res.Status != glovebox.StatusOK {
			t.Fatalf("round %d: the session after: %v %v", round, res, err)
		}
		s.Close()
	}
}

// TestSuspendKeepsEnv: a paused eval's WithEnv environment is sealed with
// it, so the continuation's replay reads the same ENV (and a session's
// replayed history reads each earlier eval's own); a Continue given
// WithEnv is refused.
func TestSuspendKeepsEnv(t *testing.T) {
	ctx := context.Background()
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	res, err := r.EvalWith(ctx, `a = ENV["A"]; d = double(1); [a, d, ENV.to_h]`, glovebox.WithEnv(map[string]string{"A": "one"}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusSuspended)
	if _, err := r.Continue(ctx, res.State, glovebox.Answer{Value: 2}, glovebox.WithEnv(nil)); !errors.Is(err, glovebox.ErrInvalidInput) {
		t.Fatalf("Continue with WithEnv: %v", err)
	}
	res = mustContinue(t, r, res.State, glovebox.Answer{Value: 2})
	if fmt.Sprint(res.Value) != fmt.Sprint([]any{"one", int64(2), map[string]any{"A": "one"}}) {
		t.Fatalf("continued: %v %+v", res.Value, res.Error)
	}

	var suspendNow atomic.Bool
	r2 := newCorpusRuntime(t, false, glovebox.Config{Hooks: glovebox.Hooks{BeforeCall: func(context.Context, string, glovebox.Args) error {
		if suspendNow.Load() {
			return glovebox.ErrSuspend
		}
		return nil
	}}})
	defer r2.Close()
	s, _ := r2.NewSession()
	if res, err := s.EvalWith(ctx, `$seen = [ENV["B"]]`, glovebox.WithEnv(map[string]string{"B": "first"})); err != nil || res.Status != glovebox.StatusOK {
		t.Fatalf("session eval 1: %v %+v", err, res)
	}
	if res, err := s.EvalWith(ctx, `$seen << ENV["B"]`, glovebox.WithEnv(map[string]string{"B": "second"})); err != nil || res.Status != glovebox.StatusOK {
		t.Fatalf("session eval 2: %v %+v", err, res)
	}
	suspendNow.Store(true)
	res, _ = s.Eval(ctx, `x = double(1); $seen + [ENV["B"], x]`)
	suspendNow.Store(false)
	wantStatus(t, res, glovebox.StatusSuspended)
	s.Close()
	s2, err := r2.ResumeSession(ctx, res.State)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	res, err = s2.Continue(ctx, glovebox.Answer{Value: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Value) != fmt.Sprint([]any{"first", "second", "second", int64(2)}) {
		t.Fatalf("session continued: %v %+v", res.Value, res.Error)
	}
}
