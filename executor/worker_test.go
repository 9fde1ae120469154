package executor_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// startWorkerEvals is an in-process executor whose evals run in bwrap
// workers: the glovebox CLI built from this tree (its eval-worker
// subcommand), or argv when given; spare is WorkerConfig.Spare.
func startWorkerEvals(t testing.TB, argv []string, spare int, env ...string) *inproc {
	t.Helper()
	p := startInproc(t, 1, nil)
	if argv == nil {
		argv = []string{glovebox(t), "eval-worker"}
	}
	err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1,
		Worker: executor.WorkerConfig{Kind: "bwrap", Argv: argv, Env: env, Spare: spare}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEvalWorkerSameAsInProcess: an eval with tool calls (one raising on
// the client, one vetoed by its hook) gives the same result, output, order
// and transcript through a bwrap worker as in the executor's own engine.
func TestEvalWorkerSameAsInProcess(t *testing.T) {
	code := `puts "one"
x = add(1, 2)
$stderr.puts "warn"
o = lookup("A7", verbose: true)
e = begin; lookup("missing"); rescue => ex; "#{ex.class}: #{ex.message}"; end
v = begin; add(13, 1); rescue => ex; ex.class.name; end
puts "two #{x}"
[x, o["id"], o["opts"], e, v, 2**70]`
	type out struct {
		status, value, stdout, stderr string
		notes                         []string
		calls                         int
	}
	run := func(p *inproc) out {
		a := newApp(t, gb.Limits{})
		ev := p.client(t, p.toks.a).Evaluator(a.rt)
		res, err := ev.EvalWith(context.Background(), code, client.EvalOptions{Stdout: a, Stderr: errWriter{a}})
		if err != nil {
			t.Fatal(err)
		}
		return out{string(res.Status), fmt.Sprint(res.Value), res.Stdout, res.Stderr, a.notes(), len(res.ToolCalls)}
	}
	in := run(startEvals(t))
	wk := run(startWorkerEvals(t, nil, 0))
	if in.status != "ok" || !strings.Contains(in.value, "NotFound: no order missing") {
		t.Fatalf("in-process baseline: %+v", in)
	}
	if in.status != wk.status || in.value != wk.value || in.stdout != wk.stdout || in.stderr != wk.stderr ||
		!slices.Equal(in.notes, wk.notes) || in.calls != wk.calls {
		t.Errorf("worker differs from in-process:\n in %+v\nwkr %+v", in, wk)
	}
}

// TestEvalWorkerSpares: with a spare worker kept started ahead, evals
// in a row each get a worker of their own (the guest's globals do not
// carry over), and closing the server stops the idle spare.
func TestEvalWorkerSpares(t *testing.T) {
	mark := newMark()
	p := startWorkerEvals(t, nil, 1, mark)
	ev := p.client(t, p.toks.a).Evaluator(newApp(t, gb.Limits{}).rt)
	for i := range 3 {
		res, err := ev.Eval(context.Background(), `$n = ($n || 0) + 1`)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, gb.StatusOK)
		if res.Value != int64(1) {
			t.Errorf("eval %d: $n is %v, want 1 (a fresh worker)", i, res.Value)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	// The spare starts in the background after an eval ends, while the
	// worker that served that eval may still be being reaped: wait for a
	// marked process that is still there 300 ms later.
	spare := 0
	for spare == 0 && time.Now().Before(deadline) {
		for _, pid := range marked(mark) {
			time.Sleep(300 * time.Millisecond)
			if slices.Contains(marked(mark), pid) {
				spare = pid
				break
			}
		}
		if spare == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if spare == 0 {
		t.Fatal("no spare worker was started")
	}
	p.hs.Close()
	p.srv.Close()
	for len(marked(mark)) > 0 && time.Now().Before(deadline) { // closeAll runs as the server stops
		time.Sleep(20 * time.Millisecond)
	}
	if left := marked(mark); len(left) > 0 {
		t.Errorf("worker processes left after Close: %v", left)
	}
}

// TestEvalWorkerSandboxed: the worker process itself (here the test
// binary in probe mode, then serving the eval as the CLI does) holds no
// capabilities, runs under a seccomp filter, cannot see a host file the
// executor can, sees of the cache directory only the engine's files and
// the image, and has no network; the eval still runs.
func TestEvalWorkerSandboxed(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host only"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startWorkerEvals(t, []string{self}, -1, "EXECUTOR_TEST_PROBE_WORKER=1", "PROBE_FILE="+secret, "PROBE_ADDR="+ln.Addr().String())
	// The probe's report arrives as streamed output (the result's Stdout
	// is the guest's own).
	var streamed syncBuf
	res, err := p.client(t, p.toks.a).Evaluator(newApp(t, gb.Limits{}).rt).EvalWith(context.Background(), `6 * 7`,
		client.EvalOptions{Stdout: &streamed})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusOK)
	if fmt.Sprint(res.Value) != "42" {
		t.Errorf("value %v", res.Value)
	}
	probe := streamed.String()
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "Seccomp:\t2", "NoNewPrivs:\t1",
		"file: no such file", "dial: refused-or-unreachable", "cache: <nil> "} {
		if !strings.Contains(probe, want) {
			t.Errorf("probe lacks %q:\n%s", want, probe)
		}
	}
	// Of the cache, the worker sees the engine's directory and the image
	// only (not a REPL's history or anything else kept there).
	for _, l := range strings.Split(probe, "\n") {
		if rest, ok := strings.CutPrefix(l, "cache: <nil> "); ok {
			for _, name := range strings.Fields(rest) {
				if name != "engine" && name != "image" {
					t.Errorf("the worker sees %s in the cache directory (%s)", name, rest)
				}
			}
		}
	}
}

// probeWorker is the test binary as an eval worker (TestMain runs it when
// EXECUTOR_TEST_PROBE_WORKER is set): it reports what it can see as a
// stdout frame, then serves the eval as `glovebox eval-worker` does.
func probeWorker() {
	var b strings.Builder
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		for _, k := range []string{"CapEff:", "CapPrm:", "Seccomp:", "NoNewPrivs:"} {
			if strings.HasPrefix(l, k) {
				b.WriteString(l + "\n")
			}
		}
	}
	if _, err := os.Stat(os.Getenv("PROBE_FILE")); os.IsNotExist(err) {
		b.WriteString("file: no such file\n")
	} else {
		fmt.Fprintf(&b, "file: visible (%v)\n", err)
	}
	if c, err := net.DialTimeout("tcp", os.Getenv("PROBE_ADDR"), 2*time.Second); err != nil {
		b.WriteString("dial: refused-or-unreachable\n")
	} else {
		c.Close()
		b.WriteString("dial: connected\n")
	}
	// What the worker sees of the cache directory.
	var names []string
	ents, err := os.ReadDir(os.Getenv(gb.EnvCacheDir))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	fmt.Fprintf(&b, "cache: %v %s\n", err, strings.Join(names, " "))
	frame, _ := json.Marshal(map[string]any{"t": "stdout", "data": []byte(b.String())})
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(frame)))
	os.Stdout.Write(append(n[:], frame...))
	if err := executor.ServeEvalWorker(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// marked lists the host pids whose environment holds mark.
func marked(mark string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && slices.Contains(strings.Split(string(env), "\x00"), mark) {
			out = append(out, pid)
		}
	}
	return out
}

// TestEvalWorkerKilled: the worker killed while its guest waits on a
// tool call ends the eval with sandbox_error and a message saying so (not
// a hang), leaves no process behind, and the executor serves the next
// eval.
func TestEvalWorkerKilled(t *testing.T) {
	mark := newMark()
	p := startWorkerEvals(t, nil, -1, mark)
	var ts gb.Toolset
	killed := make(chan []int, 1)
	if err := ts.Func("stall", func() string {
		pids := marked(mark)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		killed <- pids
		return "too late"
	}); err != nil {
		t.Fatal(err)
	}
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ev := p.client(t, p.toks.a).Evaluator(rt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := ev.Eval(ctx, `puts "before"; stall; puts "after"; 1`)
	if err != nil {
		t.Fatal(err)
	}
	if pids := <-killed; len(pids) == 0 {
		t.Fatal("found no worker process to kill")
	}
	wantStatus(t, res, gb.StatusSandboxError)
	if res.Error == nil || !strings.Contains(res.Error.Message, "the eval worker ended without a result") {
		t.Errorf("error %+v", res.Error)
	}
	if strings.Contains(res.Stdout, "after") {
		t.Errorf("stdout %q", res.Stdout)
	}
	// The executor reaped the worker before answering; its sandbox's
	// processes went with its PID namespace.
	if left := marked(mark); len(left) > 0 {
		t.Errorf("processes left after the eval: %v", left)
	}
	res, err = ev.Eval(context.Background(), `1 + 1`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusOK)
}

// TestEvalWorkerRefusesSessions: sessions would hold a VM in the
// executor's own process, outside the worker sandbox; they are refused
// with a clear error in worker mode.
func TestEvalWorkerRefusesSessions(t *testing.T) {
	p := startWorkerEvals(t, nil, 0)
	code, body := rawDo(t, p, p.toks.a, "POST", "/v1/sessions", `{"limits":{}}`)
	if code != 400 || !strings.Contains(body, "not served with an eval worker") {
		t.Errorf("%d %s", code, body)
	}
}

// BenchmarkEvalWorker: `1+1` through an in-process executor on loopback
// TLS, in the same run: evals in its own engine (with the default pool of
// one prepared VM, and with none), and in a bwrap worker per eval (with the
// default spare worker started ahead, back to back and paced 200 ms apart
// untimed so the spare is ready, and with none). The differences are the
// worker's cost per eval:
//
//	go test -run '^$' -bench BenchmarkEvalWorker -benchtime 20x ./executor
func BenchmarkEvalWorker(b *testing.B) {
	for _, mode := range []string{"in-process-pool1", "in-process-nopool", "bwrap-worker-spare1", "bwrap-worker-spare1-paced", "bwrap-worker-nospare"} {
		p := startInproc(b, 1, nil)
		cfg := executor.EvalConfig{}
		switch mode {
		case "in-process-nopool":
			cfg.PoolSize = -1
		case "bwrap-worker-spare1", "bwrap-worker-spare1-paced":
			cfg.Worker = executor.WorkerConfig{Kind: "bwrap", Argv: []string{glovebox(b), "eval-worker"}}
		case "bwrap-worker-nospare":
			cfg.Worker = executor.WorkerConfig{Kind: "bwrap", Argv: []string{glovebox(b), "eval-worker"}, Spare: -1}
		}
		if err := p.srv.EnableEvals(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
		ev := p.client(b, p.toks.a).Evaluator(newApp(b, gb.Limits{}).rt)
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				if mode == "bwrap-worker-spare1-paced" { // the spare is ready, as between an agent's turns
					b.StopTimer()
					time.Sleep(200 * time.Millisecond)
					b.StartTimer()
				}
				res, err := ev.Eval(context.Background(), `1+1`)
				if err != nil || res.Status != gb.StatusOK {
					b.Fatal(err, res)
				}
			}
		})
	}
}

// TestEvalWorkerLimitsAndCancel: in a worker an endless loop ends with
// the eval's timeout and output stops at its cap, as in-process; the
// record names the backend "wasm+bwrap"; canceling a running eval
// (DELETE) ends it canceled and leaves no worker process behind.
func TestEvalWorkerLimitsAndCancel(t *testing.T) {
	mark := newMark()
	p := startWorkerEvals(t, nil, -1, mark)
	a := newApp(t, gb.Limits{Timeout: 500 * time.Millisecond, Stdout: 4096})
	ev := p.client(t, p.toks.a).Evaluator(a.rt)
	res, err := ev.EvalWith(context.Background(), `loop { }`, client.EvalOptions{Key: "e-worker-timeout"})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusTimeout)
	if code, body := rawDo(t, p, p.toks.a, "GET", "/v1/evals/e-worker-timeout", ""); code != 200 || !strings.Contains(body, `"backend":"wasm+bwrap"`) {
		t.Errorf("record: %d %s", code, body)
	}
	var streamed syncBuf
	res, err = ev.EvalWith(context.Background(), `print "x" * 5_000_000; 7`, client.EvalOptions{Stdout: &streamed})
	if err != nil {
		t.Fatal(err)
	}
	if res.Value != int64(7) || !res.StdoutTruncated || len(streamed.String()) > 4096 {
		t.Errorf("value %v, truncated %v, streamed %d", res.Value, res.StdoutTruncated, len(streamed.String()))
	}

	slow := newApp(t, gb.Limits{Timeout: time.Minute})
	ev = p.client(t, p.toks.a).Evaluator(slow.rt)
	done := make(chan *gb.Result, 1)
	go func() {
		r, err := ev.EvalWith(context.Background(), `add(2, 2); loop { }`, client.EvalOptions{Key: "e-worker-cancel"})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	for slow.hits.Load() == 0 { // the guest is looping once its tool call came back
		time.Sleep(5 * time.Millisecond)
	}
	if len(marked(mark)) == 0 {
		t.Fatal("no worker process while the eval runs")
	}
	if code, body := rawDo(t, p, p.toks.a, "DELETE", "/v1/evals/e-worker-cancel", ""); code != 200 || !strings.Contains(body, `"status":"canceled"`) {
		t.Errorf("DELETE: %d %s", code, body)
	}
	if r := <-done; r == nil || r.Status != gb.StatusCanceled {
		t.Errorf("canceled eval: %+v", r)
	}
	if left := marked(mark); len(left) > 0 {
		t.Errorf("processes left after the canceled eval: %v", left)
	}
}

// TestEvalWorkerMemoryLimit: a guest growing past the eval's memory
// limit gets memory_limit from the worker's engine, as in-process, not a
// killed worker. (On this host it passes with no cgroup headroom too:
// the guest's untouched reservations cost no memory.)
func TestEvalWorkerMemoryLimit(t *testing.T) {
	p := startWorkerEvals(t, nil, -1)
	a := newApp(t, gb.Limits{}) // the default cap, 512 MiB: the cgroup has 1 GiB
	res, err := p.client(t, p.toks.a).Evaluator(a.rt).Eval(context.Background(), `s = "x" * 1024; a = []; loop { a << (s * 1024) }`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != gb.StatusMemoryLimit && res.Status != gb.StatusError {
		t.Errorf("status %s, want memory_limit (or NoMemoryError): %+v", res.Status, res.Error)
	}
}

// TestEvalWorkerRealProcess: `glovebox executor --evals` with
// `eval_worker: bwrap` in its config file starts its own binary as the
// worker (the default Argv) and serves an eval with a tool call through
// it; an unknown --eval-worker is a usage error.
func TestEvalWorkerRealProcess(t *testing.T) {
	s := newProcSetup(t, 1)
	f, err := os.OpenFile(s.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("eval_worker: bwrap\n")
	f.Close()
	s.extra = []string{"--evals"}
	p := s.start(t)
	a := newApp(t, gb.Limits{})
	ev := s.client(t, "https://"+p.url, s.toks.a).Evaluator(a.rt)
	res, err := ev.EvalWith(context.Background(), `puts "hi"; add(20, 22)`, client.EvalOptions{Stdout: a})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, gb.StatusOK)
	if res.Value != int64(42) || a.hits.Load() != 1 || res.Stdout != "hi\n" {
		t.Errorf("value %v, %d tool runs, stdout %q", res.Value, a.hits.Load(), res.Stdout)
	}
	if logs := p.stderr.String(); !strings.Contains(logs, "in a bwrap worker per eval") || !strings.Contains(logs, "eval worker started") {
		t.Errorf("the executor's log does not say evals run in workers:\n%s", logs)
	}

	out, err := exec.Command(glovebox(t), "executor", "--listen", "127.0.0.1:0", "--config", s.config, "--store", filepath.Join(t.TempDir(), "s.db"),
		"--tls-cert", s.cert, "--tls-key", s.key, "--evals", "--eval-worker", "gvisor").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--eval-worker "gvisor": want bwrap`) {
		t.Errorf("--eval-worker gvisor: %v %s", err, out)
	}
}

// TestEvalWorkerSpareKilledIdle: a spare worker killed while it waits
// does not fail the next eval: it is skipped when known dead, and an eval
// handed to it just as it died runs again in a fresh worker (it had sent
// nothing, so the client saw nothing twice).
func TestEvalWorkerSpareKilledIdle(t *testing.T) {
	mark := newMark()
	p := startWorkerEvals(t, nil, 1, mark)
	ev := p.client(t, p.toks.a).Evaluator(newApp(t, gb.Limits{}).rt)
	for i := range 4 {
		deadline := time.Now().Add(30 * time.Second)
		var pids []int
		for len(pids) == 0 && time.Now().Before(deadline) { // the spare is (re)started in the background
			time.Sleep(20 * time.Millisecond)
			pids = marked(mark)
		}
		if len(pids) == 0 {
			t.Fatal("no spare worker")
		}
		if i%2 == 1 {
			time.Sleep(300 * time.Millisecond) // loaded and waiting on stdin
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		res, err := ev.Eval(context.Background(), `1 + 1`)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, gb.StatusOK)
	}
}

// TestEvalWorkerCloseWaitsForStartingSpare: a spare being started when
// the server closes is stopped before Close returns. Close used to return
// at once, and a process exiting right after it (a test binary, a
// draining executor) killed the half-started bwrap by its death signal,
// which can leave the sandbox's init behind (seen once: an orphaned
// bwrap after `make test`).
func TestEvalWorkerCloseWaitsForStartingSpare(t *testing.T) {
	mark := newMark()
	release := make(chan struct{})
	blocked := make(chan struct{}, 1)
	defer executor.SetRefillHook(func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-release
	})()
	p := startWorkerEvals(t, nil, 1, mark) // its first spare starts, and waits in the hook
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("no spare was started")
	}
	p.hs.Close()
	closed := make(chan struct{})
	go func() { p.srv.Close(); close(closed) }()
	select {
	case <-closed:
		close(release)
		t.Fatal("Close returned while a spare was still being started")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	for deadline := time.Now().Add(5 * time.Second); len(marked(mark)) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // killed processes still exiting
	}
	if left := marked(mark); len(left) > 0 {
		t.Errorf("worker processes left after Close: %v", left)
	}
}

// newMark is an environment entry unique to one test, to find its worker
// processes by (see marked).
func newMark() string {
	var rb [8]byte
	rand.Read(rb[:])
	return "GLOVEBOX_TEST_MARK=" + hex.EncodeToString(rb[:])
}
