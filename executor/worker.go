package executor

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
)

// WorkerConfig runs each eval in a worker process of its own, inside
// bubblewrap, instead of in the executor's wasm engine (EXECUTOR.md,
// "Where the guest runs"). The zero value (Kind "") means in-process.
type WorkerConfig struct {
	// Kind is "" (in-process) or "bwrap".
	Kind string
	// Argv is the worker program and its arguments; it must serve one
	// eval with [ServeEvalWorker] on its stdin and stdout. Empty means
	// this executable with the argument "eval-worker" (the glovebox CLI's
	// hidden subcommand). Argv[0] is bound read-only into the sandbox at
	// the same path, as are the guest image and the cache's engine
	// directory (compiled code and snapshots); nothing else of the cache
	// directory is.
	Argv []string
	// Env is added to the worker's environment (which otherwise holds
	// only PATH, HOME=/tmp and the cache settings).
	Env []string
	// Grace is how long past the eval's timeout the executor waits for
	// the worker's result before killing it (the worker boots its engine
	// from the cache first). Zero means DefaultWorkerGrace.
	Grace time.Duration
	// Spare is how many workers are kept started ahead, engine loaded,
	// waiting for an eval (each still serves one eval only); zero means 1,
	// negative none. A spare costs one idle process with the compiled
	// module mapped.
	Spare int
}

// DefaultWorkerGrace is 30 s: a worker's engine boot from a warm cache
// takes tens of milliseconds, but seconds on a loaded 2-core host.
const DefaultWorkerGrace = 30 * time.Second

// maxWorkerFrame bounds one frame from a worker (256 MiB, the client's
// bound on one event): a worker is not trusted to size its frames.
const maxWorkerFrame = 256 << 20

// workerMsg is one frame of the worker protocol: a 4-byte big-endian
// length, then this as JSON. Executor → worker: "eval" (once, first),
// "tool_result". Worker → executor: "stdout", "stderr", "tool_call",
// then "result" or "error" (last).
type workerMsg struct {
	T      string           `json:"t"`
	Eval   *workerEval      `json:"eval,omitempty"`
	ID     uint64           `json:"id,omitempty"`
	Name   string           `json:"name,omitempty"`
	Args   string           `json:"args,omitempty"`
	Reply  string           `json:"reply,omitempty"`
	Data   []byte           `json:"data,omitempty"`
	Result *wire.EvalResult `json:"result,omitempty"`
	Err    *wire.Error      `json:"err,omitempty"`
}

type workerEval struct {
	Code      string            `json:"code"`
	Tools     []string          `json:"tools,omitempty"`
	Limits    glovebox.Limits   `json:"limits"`
	Stdin     []byte            `json:"stdin,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	CacheDir  string            `json:"cache_dir,omitempty"`
	ImagePath string            `json:"image_path,omitempty"`
}

// frameConn reads and writes frames; writes are serialized.
type frameConn struct {
	r   *bufio.Reader
	wmu sync.Mutex
	w   io.Writer
}

func (c *frameConn) send(m *workerMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := c.w.Write(append(n[:], b...)); err != nil {
		return err
	}
	return nil
}

func (c *frameConn) recv() (*workerMsg, error) {
	var n [4]byte
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxWorkerFrame {
		return nil, fmt.Errorf("a frame of %d bytes, over %d", size, maxWorkerFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, fmt.Errorf("a cut frame: %w", err)
	}
	var m workerMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("a malformed frame: %w", err)
	}
	return &m, nil
}

// ServeEvalWorker is the worker side: it reads one eval from in, runs it
// in a fresh glovebox Runtime (its tools relay each call over out and wait
// for the answer on in), writes its output, tool calls and result to out,
// and returns. The glovebox CLI runs it as `glovebox eval-worker` inside
// the sandbox; nothing else should call it. Errors: in or out failed or
// carried a malformed frame (the eval's own failures go out as frames).
func ServeEvalWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	c := &frameConn{r: bufio.NewReader(in), w: out}
	// Load the engine (compiled module, boot snapshot) before the eval
	// comes: a spare worker waits with it loaded, and the eval's Runtime
	// shares it. Failing here is not final: the eval's New reports.
	var lim glovebox.Limits
	if os.Getenv(envWorkerMetered) != "" {
		lim.Fuel = 1
	}
	warm, _ := glovebox.New(ctx, glovebox.Config{Limits: lim, PoolSize: -1})
	m, err := c.recv()
	if err != nil {
		return fmt.Errorf("eval worker: reading the eval: %w", err)
	}
	if m.T != "eval" || m.Eval == nil {
		return fmt.Errorf("eval worker: first frame %q, want eval", m.T)
	}
	ev := m.Eval
	if warm != nil {
		defer warm.Close()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	waiting := map[uint64]chan string{}
	var next uint64
	go func() { // tool answers; the parent gone ends the eval
		defer cancel()
		for {
			m, err := c.recv()
			if err != nil || m.T != "tool_result" {
				return
			}
			mu.Lock()
			ch := waiting[m.ID]
			delete(waiting, m.ID)
			mu.Unlock()
			if ch != nil {
				ch <- m.Reply
			}
		}
	}()
	var tools glovebox.Toolset
	for _, name := range ev.Tools {
		err := tools.Add(name, func(ctx context.Context, a glovebox.Args) (any, error) {
			args, err := clientwire.EncodeArgs(name, a)
			if err != nil {
				return nil, err
			}
			ch := make(chan string, 1)
			mu.Lock()
			next++
			id := next
			waiting[id] = ch
			mu.Unlock()
			if err := c.send(&workerMsg{T: "tool_call", ID: id, Name: name, Args: string(args)}); err != nil {
				return nil, &engine.GuestError{Class: "ToolError", Message: "the eval's tool channel is closed"}
			}
			select {
			case rep := <-ch:
				return clientwire.DecodeReply(rep)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		if err != nil {
			return c.send(&workerMsg{T: "error", Err: wire.Errorf(wire.CodeBadRequest, "tools: %v", err)})
		}
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &tools, CacheDir: ev.CacheDir, ImagePath: ev.ImagePath,
		Limits: ev.Limits, PoolSize: -1})
	if err != nil {
		return c.send(&workerMsg{T: "error", Err: wire.Errorf(wire.CodeInternal, "making the VM in the worker: %v; the eval did not run", err)})
	}
	defer rt.Close()
	opts := []glovebox.EvalOption{glovebox.WithOutput(frameWriter{c, "stdout"}, frameWriter{c, "stderr"})}
	if len(ev.Stdin) > 0 {
		opts = append(opts, glovebox.WithStdin(strings.NewReader(string(ev.Stdin))))
	}
	if len(ev.Args) > 0 {
		opts = append(opts, glovebox.WithArgs(ev.Args...))
	}
	if len(ev.Env) > 0 {
		opts = append(opts, glovebox.WithEnv(ev.Env))
	}
	res, err := rt.EvalWith(ctx, ev.Code, opts...)
	if err != nil {
		return c.send(&workerMsg{T: "error", Err: evalErr(err)})
	}
	return c.send(&workerMsg{T: "result", Result: clientwire.FromResult(res)})
}

// evalErr is the wire error of a failed EvalWith.
func evalErr(err error) *wire.Error {
	code := wire.CodeInternal
	switch {
	case errors.Is(err, glovebox.ErrInvalidInput):
		code = wire.CodeBadRequest
	case errors.Is(err, glovebox.ErrClosed):
		code = wire.CodeUnavailable
	case errors.Is(err, glovebox.ErrSessionClosed):
		code = wire.CodeNotFound // closed while this eval waited for it
	}
	return wire.Errorf(code, "%v", err)
}

type frameWriter struct {
	c *frameConn
	t string
}

func (w frameWriter) Write(p []byte) (int, error) {
	if err := w.c.send(&workerMsg{T: w.t, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// tailBuf keeps the last 4 KiB written to it (a worker's stderr, for the
// message of a crash).
type tailBuf struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	t.mu.Unlock()
	return len(p), nil
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// workerOverhead is the memory a worker may use beyond its guest's linear
// memory (the Go runtime, the compiled module's pages, the engine's
// tables): 512 MiB, our margin over the ~60 MB a worker holds at rest,
// so a guest at its own limit gets memory_limit from the engine, not an
// OOM kill.
const workerOverhead = 512 << 20

// envWorkerMetered tells a worker its evals are likely metered (the
// executor caps fuel), so it warms the fuel-metered engine.
const envWorkerMetered = "GLOVEBOX_EVAL_WORKER_METERED"

// workerPool starts workers; made once by EnableEvals.
type workerPool struct {
	box      *bwrap.Box
	argv     []string
	env      []string
	ro       []string
	grace    time.Duration
	cacheDir string
	// imagePath is the guest image the workers use (bound read-only,
	// as is cacheDir/engine; nothing else of cacheDir is).
	imagePath string

	memory  int64 // the worker's cgroup memory: the eval cap plus workerOverhead
	log     *slog.Logger
	logOnce sync.Once      // the first worker's posture is logged
	reaping sync.WaitGroup // workers that answered, being reaped
	// starting counts spares being started (refill): close waits for
	// them, so that none is left running when the server is gone (a
	// bwrap killed mid-start by its parent's death can leave its
	// sandbox's init behind).
	starting sync.WaitGroup
	mu       sync.Mutex
	spare    []*worker // started ahead, idle
	want     int       // how many spares to keep
	closed   bool
}

// worker is one started worker process.
type worker struct {
	w      *bwrap.Worker
	stderr *tailBuf
	exited chan error // Wait's result, buffered 1
}

// stop kills w and waits for it.
func (w *worker) stop() {
	w.w.Kill()
	err := <-w.exited
	w.exited <- err
}

func (wp *workerPool) start() (*worker, error) {
	stderr := &tailBuf{}
	bw, err := wp.box.StartWorker(bwrap.WorkerSpec{Argv: wp.argv, ReadOnly: wp.ro, Env: wp.env, Stderr: stderr,
		Limits: box.Limits{Memory: wp.memory}})
	if err != nil {
		return nil, err
	}
	w := &worker{w: bw, stderr: stderr, exited: make(chan error, 1)}
	go func() { w.exited <- bw.Wait() }()
	wp.logOnce.Do(func() { wp.log.Info("eval worker started", "kind", "bwrap", "enforced", bw.Enforced) })
	return w, nil
}

// takeSpare returns a spare worker not known to have exited, if any.
// The caller calls refill when its eval is over (a spare started
// meanwhile would take CPU from the eval).
func (wp *workerPool) takeSpare() (*worker, bool) {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	for len(wp.spare) > 0 {
		w := wp.spare[0]
		wp.spare = wp.spare[1:]
		select {
		case err := <-w.exited: // died idle
			w.exited <- err
			continue
		default:
		}
		return w, true
	}
	return nil, false
}

// refill starts spares, in the background, up to want.
func (wp *workerPool) refill() {
	wp.mu.Lock()
	n := wp.want - len(wp.spare)
	wp.mu.Unlock()
	for range n {
		wp.starting.Add(1)
		go func() {
			defer wp.starting.Done()
			if testHookRefill != nil {
				testHookRefill()
			}
			w, err := wp.start()
			if err != nil {
				return // the next eval starts its own and reports why
			}
			wp.mu.Lock()
			if wp.closed || len(wp.spare) >= wp.want {
				wp.mu.Unlock()
				w.stop()
				return
			}
			wp.spare = append(wp.spare, w)
			wp.mu.Unlock()
		}()
	}
}

// testHookRefill, if set, runs as a spare starts (see
// TestEvalWorkerCloseWaitsForStartingSpare).
var testHookRefill func()

// close stops the spares; evals running in workers end with the server.
func (wp *workerPool) close() {
	wp.mu.Lock()
	wp.closed = true
	ss := wp.spare
	wp.spare = nil
	wp.mu.Unlock()
	for _, w := range ss {
		w.stop()
	}
	wp.starting.Wait() // each sees closed and stops its worker
	wp.reaping.Wait()
}

func newWorkerPool(cfg EvalConfig, caps glovebox.Limits, log *slog.Logger) (*workerPool, error) {
	wc := cfg.Worker
	if wc.Kind != "bwrap" {
		return nil, fmt.Errorf("executor: eval worker %q: want \"\" or \"bwrap\"", wc.Kind)
	}
	b, err := bwrap.New(bwrap.Config{})
	if err != nil {
		return nil, fmt.Errorf("executor: eval worker: %w", err)
	}
	argv := wc.Argv
	if len(argv) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("executor: eval worker: %w", err)
		}
		argv = []string{self, "eval-worker"}
	}
	exe, err := filepath.Abs(argv[0])
	if err != nil {
		return nil, err
	}
	argv = append([]string{exe}, argv[1:]...)
	cache := cfg.CacheDir
	if cache == "" {
		if cache, err = glovebox.DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	if cache, err = filepath.Abs(cache); err != nil {
		return nil, err
	}
	// The worker sees of the cache only what its engine reads: the
	// image file and the compiled code and snapshots (cache/engine),
	// not the rest of the directory (a REPL's history, say).
	img := cfg.ImagePath
	if img == "" {
		// $GLOVEBOX_IMAGE, the image beside this executable, or the
		// cached one (fetched by the executor's own Runtime by now).
		if img, _, err = image.Find(cache); err != nil {
			return nil, err
		}
	}
	if img, err = filepath.Abs(img); err != nil {
		return nil, err
	}
	ro := []string{exe, img, filepath.Join(cache, "engine")}
	env := []string{"PATH=/usr/bin:/bin", "HOME=/tmp", glovebox.EnvCacheDir + "=" + cache, image.EnvImage + "=" + img}
	if caps.Fuel > 0 {
		env = append(env, envWorkerMetered+"=1")
	}
	grace := wc.Grace
	if grace <= 0 {
		grace = DefaultWorkerGrace
	}
	want := wc.Spare
	if want == 0 {
		want = 1
	}
	wp := &workerPool{memory: caps.Memory + workerOverhead, log: log, box: b, argv: argv, env: append(env, wc.Env...), ro: ro, grace: grace, cacheDir: cache, imagePath: img, want: max(want, 0)}
	wp.refill()
	return wp, nil
}

// sandboxError is the record of an eval whose worker failed: a definite
// sandbox_error status, never a hung eval.
func sandboxError(msg string, start time.Time) *wire.Record {
	return &wire.Record{State: wire.StateCompleted, Eval: &wire.EvalResult{
		Status: string(glovebox.StatusSandboxError), Value: "null",
		Error:      &wire.GuestError{Class: "SandboxError", Message: msg, Backtrace: []string{}},
		DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	}}
}

// runInWorker is run's worker half: one eval in a fresh sandboxed worker,
// its tool calls relayed through run exactly as in-process ones.
func (e *evals) runInWorker(ctx context.Context, j *job, run *evalRun, req *wire.EvalRequest, names []string) *wire.Record {
	start := time.Now()
	rec, retry := e.workerAttempt(ctx, j, run, req, names, start, true)
	if retry {
		// A spare that died idle (killed from outside, say) before it sent
		// anything: the guest made no output and no tool call, so running
		// the eval in a fresh worker repeats nothing the client saw.
		e.s.log.Warn("a spare eval worker had died; running the eval in a fresh one")
		rec, _ = e.workerAttempt(ctx, j, run, req, names, start, false)
	}
	return rec
}

// workerAttempt runs the eval in one worker: a spare when useSpare and
// one is ready. retry is true, and the record nil, when that spare ended
// before sending a single frame.
func (e *evals) workerAttempt(ctx context.Context, j *job, run *evalRun, req *wire.EvalRequest, names []string, start time.Time, useSpare bool) (_ *wire.Record, retry bool) {
	wp := e.worker
	lim := e.limits(req.Limits)
	var wk *worker
	spare := false
	if useSpare {
		wk, spare = wp.takeSpare()
	}
	if wk == nil {
		var err error
		if wk, err = wp.start(); err != nil {
			return sandboxError(fmt.Sprintf("the eval worker did not start: %v", err), start), false
		}
	}
	// A worker that answered exits by itself; it is killed (cgroup.Kill
	// waits for its tasks to go, about 10 ms) and reaped in the background,
	// off the eval's path; any other end
	// waits for it, so a failed eval leaves nothing behind when it returns.
	answered := false
	defer func() {
		defer wp.refill()
		if !answered {
			wk.stop()
			return
		}
		wp.reaping.Add(1)
		go func() { defer wp.reaping.Done(); wk.stop() }()
	}()
	w, stderr, exited := wk.w, wk.stderr, wk.exited
	c := &frameConn{r: bufio.NewReader(w.Stdout), w: w.Stdin}
	ev := &workerEval{Code: req.Code, Tools: names, Limits: lim, Stdin: req.Stdin, Args: req.Args, Env: req.Env,
		CacheDir: wp.cacheDir, ImagePath: wp.imagePath}
	go c.send(&workerMsg{T: "eval", Eval: ev}) // a dead worker fails it; recv reports that
	type got struct {
		m   *workerMsg
		err error
	}
	frames := make(chan got)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			m, err := c.recv()
			select {
			case frames <- got{m, err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	deadline := time.NewTimer(lim.Timeout + wp.grace)
	defer deadline.Stop()
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	// The worker's engine caps what it streams at the eval's limits, as
	// in-process; a worker past them is not behaving and is stopped.
	var outBytes, errBytes, nframes int
	for {
		select {
		case <-ctx.Done():
			st := glovebox.StatusCanceled
			return &wire.Record{State: wire.StateCompleted, Eval: &wire.EvalResult{Status: string(st), Value: "null",
				Error:      &wire.GuestError{Class: "Interrupt", Message: "the eval was canceled", Backtrace: []string{}},
				DurationMS: float64(time.Since(start).Microseconds()) / 1000}}, false
		case <-deadline.C:
			return sandboxError(fmt.Sprintf("the eval worker gave no result within the eval's timeout (%v) and %v more; it was killed", lim.Timeout, wp.grace), start), false
		case g := <-frames:
			if g.err != nil {
				w.Kill()
				werr := <-exited
				exited <- werr // for the deferred receive
				msg := "the eval worker ended without a result"
				if werr != nil {
					msg += " (" + werr.Error() + ")"
				}
				if !errors.Is(g.err, io.EOF) {
					msg += ": " + g.err.Error()
				}
				if s := stderr.String(); s != "" {
					msg += "; its stderr: " + s
				}
				if spare && nframes == 0 {
					return nil, true
				}
				return sandboxError(msg, start), false
			}
			nframes++
			switch m := g.m; m.T {
			case "stdout":
				if outBytes += len(m.Data); outBytes > lim.Stdout {
					return sandboxError(fmt.Sprintf("the eval worker streamed over %d bytes of stdout, the eval's limit; it was killed", lim.Stdout), start), false
				}
				j.output(wire.EventStdout, m.Data)
			case "stderr":
				if errBytes += len(m.Data); errBytes > lim.Stderr {
					return sandboxError(fmt.Sprintf("the eval worker streamed over %d bytes of stderr, the eval's limit; it was killed", lim.Stderr), start), false
				}
				j.output(wire.EventStderr, m.Data)
			case "tool_call":
				if !toolNamed(names, m.Name) {
					return sandboxError(fmt.Sprintf("the eval worker called tool %q, not one of the eval's", m.Name), start), false
				}
				go func(id uint64, name, args string) {
					rep := run.callReply(tctx, name, []byte(args))
					c.send(&workerMsg{T: "tool_result", ID: id, Reply: rep})
				}(m.ID, m.Name, m.Args)
			case "result":
				if m.Result == nil {
					return sandboxError("the eval worker sent an empty result", start), false
				}
				answered = true
				return &wire.Record{State: wire.StateCompleted, Eval: m.Result}, false
			case "error":
				if m.Err == nil {
					return sandboxError("the eval worker sent an empty error", start), false
				}
				answered = true
				return &wire.Record{State: wire.StateFailed, Error: m.Err}, false
			default:
				return sandboxError(fmt.Sprintf("the eval worker sent a frame of type %q", m.T), start), false
			}
		}
	}
}

func toolNamed(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

// callReply is call for a worker: the client's reply frame as it came,
// or the executor's own verdict (the tool-bytes bound, a closed channel)
// in the same frame format.
func (run *evalRun) callReply(ctx context.Context, name string, args []byte) string {
	rep, err := run.callRaw(ctx, name, args)
	if err == nil {
		return rep
	}
	var ab *engine.Abort
	var ge *engine.GuestError
	switch {
	case errors.As(err, &ab):
		return "abort\n" + string(ab.Status) + "\n" + ab.Message
	case errors.As(err, &ge):
		return "err\n" + ge.Class + "\n" + ge.Message
	}
	return "err\nToolError\n" + err.Error()
}
