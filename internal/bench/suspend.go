package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Suspension rows (issue 24): idle sessions suspended and resumed beside
// a fresh VM, state sizes, a paused eval continued in a new process
// beside the same program run straight, and many states in a directory.

// heapProgram writes mib MiB of heap (hex digits of random bytes, which
// compress about 2:1, so the state grows with what was written); 0 is
// x = 1.
func heapProgram(mib int) string {
	if mib == 0 {
		return `x = 1`
	}
	return `$h = Random.new(1).bytes(` + strconv.Itoa(mib<<19) + `).unpack1("H*"); x = 1`
}

func benchSuspend(ctx context.Context, samples, states int, row func(met string, cols ...string), yes func(bool) string) error {
	secret := make([]byte, 32)
	crand.Read(secret)
	keys, err := glovebox.NewKeyring(glovebox.StateKey{ID: "bench", Secret: secret})
	if err != nil {
		return err
	}
	rt, err := glovebox.New(ctx, glovebox.Config{StateKeys: keys, PoolSize: 2, Progress: progress})
	if err != nil {
		return err
	}
	defer rt.Close()
	idle := func(code string) ([]byte, error) {
		s, err := rt.NewSession()
		if err != nil {
			return nil, err
		}
		if res, err := s.Eval(ctx, code); err != nil || res.Status != glovebox.StatusOK {
			s.Close()
			return nil, fmt.Errorf("bench: %s: %v %v", code, err, res)
		}
		return s.Suspend(ctx)
	}
	// Baseline: a fresh VM from the snapshot, its session's first eval.
	var fresh []time.Duration
	for range samples {
		start := time.Now()
		s, err := rt.NewSession()
		if err != nil {
			return err
		}
		if _, err := s.Eval(ctx, "nil"); err != nil {
			return err
		}
		fresh = append(fresh, time.Since(start))
		s.Close()
		time.Sleep(time.Millisecond) // the pool refills when quiet
	}
	fr := summarize(fresh)
	state, err := idle(heapProgram(1))
	if err != nil {
		return err
	}
	var sus, res []time.Duration
	for range samples {
		start := time.Now()
		s, err := rt.ResumeSession(ctx, state)
		if err != nil {
			return err
		}
		res = append(res, time.Since(start))
		start = time.Now()
		if state, err = s.Suspend(ctx); err != nil {
			return err
		}
		sus = append(sus, time.Since(start))
	}
	ss, rs := summarize(sus), summarize(res)
	base := "fresh VM " + ms(fr.p50) + " p50"
	row(yes(ss.p50 <= time.Millisecond && ss.p99 <= 5*time.Millisecond), "suspend idle session (1 MiB heap written)",
		"p50 "+ms(ss.p50)+"  p99 "+ms(ss.p99), base, ratio(ss.p50, fr.p50), "≤ 1 ms p50, ≤ 5 ms p99")
	row(yes(rs.p50 <= time.Millisecond && rs.p99 <= 5*time.Millisecond), "resume idle session (1 MiB heap written)",
		"p50 "+ms(rs.p50)+"  p99 "+ms(rs.p99), base, ratio(rs.p50, fr.p50), "≤ 1 ms p50, ≤ 5 ms p99")

	// State sizes: what the program wrote, not the memory floor.
	for _, mib := range []int{0, 1, 10} {
		st, err := idle(heapProgram(mib))
		if err != nil {
			return err
		}
		name, target, met := "state size, x = 1", "≤ 200 KB", yes(len(st) <= 200e3)
		if mib > 0 {
			name, target, met = fmt.Sprintf("state size, %d MiB of heap written", mib), "grows with the heap", "-"
		}
		row(met, name, fmt.Sprintf("%.1f KB", float64(len(st))/1e3), fmt.Sprintf("memory floor %d MiB", rt.MemoryFloor()>>20), "-", target)
	}

	if err := benchNewProcess(ctx, row); err != nil {
		row("-", "paused eval continued in a new process", "skipped: "+err.Error(), "-", "-", "-")
	}
	if err := benchStateDir(ctx, rt, idle, states, row, yes); err != nil {
		return err
	}
	benchMonty(ctx, row)
	return nil
}

// selfExe is the glovebox binary the new-process row runs (a test sets
// the one it built).
var selfExe = os.Executable

// The CLI's state-key variable and its exit status for a suspended eval
// (cmd/glovebox: statefile.go, main.go), which the new-process row drives.
const (
	envStateKey   = "GLOVEBOX_STATE_KEY"
	exitSuspended = 3
)

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

// benchNewProcess: a program paused at an approval-gated call, continued
// by glovebox resume in a new process (wall time from the answer given
// to the result printed), beside the same program run straight by
// glovebox eval in a new process. Both calls are denied (the straight
// run's at once: no terminal to ask on), so both take the same path and
// no network is used.
func benchNewProcess(ctx context.Context, row func(met string, cols ...string)) error {
	exe, err := selfExe()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "glovebox-bench-resume")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	key := make([]byte, 32)
	crand.Read(key)
	env := append(os.Environ(), envStateKey+"="+hex.EncodeToString(key))
	code := `a = (1..2000).map { |i| i * i }.sum
r = begin; http_get("https://example.com/"); rescue Glovebox::ToolDenied => e; e.message; end
[a, r]`
	flags := []string{"--http-allow", "example.com", "--approve", "http_get"}
	timed := func(args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Env = env
		start := time.Now()
		out, err := spawn.CombinedOutput(cmd)
		d := time.Since(start)
		if err != nil && cmd.ProcessState.ExitCode() != exitSuspended {
			return 0, fmt.Errorf("%v: %s", err, out)
		}
		return d, nil
	}
	const n = 7
	var cont, straight []time.Duration
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("s%d.state", i))
		if _, err := timed(append([]string{"eval", "--suspend-to", p, "-e", code}, flags...)...); err != nil {
			return err
		}
		d, err := timed(append([]string{"resume", p, "--deny", "no"}, flags[:2]...)...)
		if err != nil {
			return err
		}
		cont = append(cont, d)
		if d, err = timed(append([]string{"eval", "-e", code}, flags...)...); err != nil {
			return err
		}
		straight = append(straight, d)
	}
	c, s := summarize(cont), summarize(straight)
	row("-", "paused eval continued in a new process (glovebox resume: answer → result)", "p50 "+ms(c.p50),
		"same program run straight, new process "+ms(s.p50), ratio(c.p50, s.p50), "-")
	return nil
}

// benchStateDir writes n idle sessions' states to files in a directory
// on the cache's disk and resumes one at random (read and resumed),
// reporting p99, what the read and the resume each took at p99 (the tail
// is one or the other), and the disk the states take.
func benchStateDir(ctx context.Context, rt *glovebox.Runtime, idle func(string) ([]byte, error), n int, row func(met string, cols ...string), yes func(bool) string) error {
	cache, err := glovebox.DefaultCacheDir()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(cache, "bench-states-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	done := progress(fmt.Sprintf("writing %d suspended sessions to %s", n, dir))
	var disk int64
	for i := range n {
		st, err := idle(fmt.Sprintf("x = %d; $name = %q", i, fmt.Sprint("session-", i)))
		if err != nil {
			done()
			return err
		}
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, st, 0o600); err != nil {
			done()
			return err
		}
		var sys syscall.Stat_t
		if syscall.Stat(p, &sys) == nil {
			disk += sys.Blocks * 512
		}
	}
	done()
	const draws = 1000
	var ds, reads, resumes []time.Duration
	for range draws {
		p := filepath.Join(dir, strconv.Itoa(rand.IntN(n)))
		start := time.Now()
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		read := time.Now()
		s, err := rt.ResumeSession(ctx, b)
		if err != nil {
			return err
		}
		end := time.Now()
		ds, reads, resumes = append(ds, end.Sub(start)), append(reads, read.Sub(start)), append(resumes, end.Sub(read))
		s.Close()
	}
	d, rd, rs := summarize(ds), summarize(reads), summarize(resumes)
	row(yes(d.p99 <= 5*time.Millisecond), fmt.Sprintf("%d suspended sessions in a directory, one resumed at random (--states %d)", n, n),
		fmt.Sprintf("p99 %s  (p50 %s; p99 of the read %s, of the resume %s)", ms(d.p99), ms(d.p50), ms(rd.p99), ms(rs.p99)),
		fmt.Sprintf("disk %.1f MB, %.1f KB a state", float64(disk)/1e6, float64(disk)/float64(n)/1e3), "-", "≤ 5 ms p99 (issue: 100,000)")
	return nil
}

// benchMonty measures Monty's dump and load of a REPL session holding a
// 1 MiB string (the Node package @pydantic/monty) as a peer, found or
// installed by montyDir; it says why it skipped when node or the package
// is not to be had.
func benchMonty(ctx context.Context, row func(met string, cols ...string)) {
	const script = `const m = await import("@pydantic/monty");
const Repl = m.MontyRepl;
const r = new Repl();
r.feed("h = 'ab' * (1 << 19)\nx = 1");
const r0 = new Repl(); r0.feed("x = 1"); const s0 = r0.dump().length;
const N = 200, d = [], l = []; let size = 0;
for (let i = 0; i < N; i++) {
  const a = process.hrtime.bigint(); const b = r.dump(); const c = process.hrtime.bigint();
  Repl.load(b); const e = process.hrtime.bigint();
  size = b.length; d.push(Number(c - a) / 1e6); l.push(Number(e - c) / 1e6);
}
d.sort((a, b) => a - b); l.sort((a, b) => a - b);
console.log("dump p50 " + d[N/2].toFixed(2) + " ms  load p50 " + l[N/2].toFixed(2) + " ms  state " + (size/1e3).toFixed(1) + " KB (x = 1: " + (s0/1e3).toFixed(1) + " KB)");`
	const name = "peer: Monty REPL dump/load (@pydantic/monty, 1 MiB string)"
	node, err := exec.LookPath("node")
	if err != nil {
		row("-", name, "skipped: node is not installed", "-", "-", "-")
		return
	}
	dir, err := montyDir(ctx)
	if err != nil {
		row("-", name, "skipped: "+err.Error(), "-", "-", "-")
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, node, "--input-type=module", "-e", script)
	cmd.Dir = dir
	out, err := spawn.CombinedOutput(cmd)
	if err != nil {
		row("-", name, "skipped: it does not run here: "+firstLine(string(out)), "-", "-", "-")
		return
	}
	row("-", name, firstLine(string(out)), "-", "-", "-")
}

// montyVersion is the @pydantic/monty release the peer row installs when
// none is found (the newest npm served when the row was written).
const montyVersion = "0.0.18"

// montyDir returns a directory whose node_modules holds @pydantic/monty:
// $GLOVEBOX_MONTY_DIR when set (it must hold it), else the current
// directory when it does, else "bench-peers" under glovebox's cache
// directory, where npm installs montyVersion on first use (a few seconds,
// said on stderr). Errors: the package is missing and npm is not
// installed or its install failed (npm's last line in the message).
func montyDir(ctx context.Context) (string, error) {
	has := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "node_modules", "@pydantic", "monty", "package.json"))
		return err == nil
	}
	if dir := os.Getenv("GLOVEBOX_MONTY_DIR"); dir != "" {
		if !has(dir) {
			return "", fmt.Errorf("@pydantic/monty is not installed in GLOVEBOX_MONTY_DIR=%s (npm install @pydantic/monty there)", dir)
		}
		return dir, nil
	}
	if wd, err := os.Getwd(); err == nil && has(wd) {
		return wd, nil
	}
	cache, err := glovebox.DefaultCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "bench-peers")
	if has(dir) {
		return dir, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("@pydantic/monty is not installed and npm is not there to install it (or set GLOVEBOX_MONTY_DIR)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "glovebox: installing @pydantic/monty@%s with npm into %s for the peer row...\n", montyVersion, dir)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
		"--prefix", dir, "@pydantic/monty@"+montyVersion)
	if out, err := spawn.CombinedOutput(cmd); err != nil || !has(dir) {
		return "", fmt.Errorf("npm install @pydantic/monty@%s failed: %v: %s", montyVersion, err, lastLine(string(out)))
	}
	return dir, nil
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
