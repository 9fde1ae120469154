// Package sbx is the machinery the OS backends share: the working
// directory, the environment, output capture with caps and streaming, the
// timeout and the exit status.
package sbx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Workdir is one run's host directories: Work is bound as the command's
// working directory (Outputs is Work/outputs), Tmp as its /tmp. Root
// holds LockName, flocked until Remove (see Sweep).
type Workdir struct {
	Root, Work, Outputs, Tmp string
	lock                     *os.File
}

// GuestWork is the working directory's path inside every OS box.
const GuestWork = "/work"

// Prepare makes a fresh directory tree under the system temp dir, locked
// for the run's life, and writes c.Files into Work. First it sweeps the
// temp dir (see Sweep; at most every ten seconds per process).
func Prepare(c *box.Command) (*Workdir, error) {
	base := os.TempDir()
	maybeSweep(base)
	root, err := os.MkdirTemp(base, RunPrefix)
	if err != nil {
		return nil, err
	}
	w := &Workdir{Root: root, Work: filepath.Join(root, "work"), Tmp: filepath.Join(root, "tmp")}
	// The lock file is made and locked under another name, then renamed
	// into place: whoever opens LockName finds it locked already (a
	// directory without one is judged by LegacyAge).
	tmpLock := filepath.Join(root, LockName+".new")
	w.lock, err = os.OpenFile(tmpLock, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err == nil {
		err = syscall.Flock(int(w.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(tmpLock, filepath.Join(root, LockName))
	}
	if err != nil {
		w.Remove()
		return nil, fmt.Errorf("locking the run directory: %w", err)
	}
	w.Outputs = filepath.Join(w.Work, "outputs")
	for _, d := range []string{w.Work, w.Outputs, w.Tmp} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			w.Remove()
			return nil, err
		}
		// The guest may run as another uid: let it write its own dirs.
		os.Chmod(d, 0o777)
	}
	for name, data := range c.Files {
		p := filepath.Join(w.Work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			w.Remove()
			return nil, err
		}
		if err := os.WriteFile(p, data, 0o666); err != nil {
			w.Remove()
			return nil, err
		}
	}
	return w, nil
}

// CheckMounts reports a Mount whose host path is not a directory, with an
// error wrapping box.ErrInvalidCommand.
func CheckMounts(c *box.Command) error {
	for _, m := range c.Mounts {
		fi, err := os.Stat(m.HostPath)
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("%w: mount host path %s is not a directory", box.ErrInvalidCommand, m.HostPath)
		}
	}
	return nil
}

// Remove deletes the tree, then lets its lock go.
func (w *Workdir) Remove() {
	os.RemoveAll(w.Root)
	if w.lock != nil {
		w.lock.Close()
	}
}

// MaxOutputFiles bounds how many files ReadOutputs reads back: the byte
// budget alone let a command leave a million empty files, each a map entry
// in the host's memory and a line of the result.
const MaxOutputFiles = 1000

// ReadOutputs reads the regular files under Outputs (symlinks are not
// followed), at most max bytes and MaxOutputFiles files in all, in path
// order; truncated says some were left out.
func (w *Workdir) ReadOutputs(max int64) (map[string][]byte, bool) {
	var names []string
	truncated := false
	filepath.WalkDir(w.Outputs, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if len(names) == MaxOutputFiles {
				truncated = true
				return filepath.SkipAll
			}
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	out := map[string][]byte{}
	for _, p := range names {
		rel, _ := filepath.Rel(w.Outputs, p)
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(f, max+1))
		f.Close()
		if int64(len(b)) > max {
			truncated = true
			break
		}
		max -= int64(len(b))
		out[filepath.ToSlash(rel)] = b
	}
	if len(out) == 0 {
		out = nil
	}
	return out, truncated
}

// Env is the command's environment: PATH, HOME, TMPDIR, then c.Env, then
// the credentials, resolved now. A credential error names the variable
// only: its function's error may hold the secret.
func Env(ctx context.Context, c *box.Command, extra ...string) ([]string, error) {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + GuestWork, "TMPDIR=/tmp", "LANG=C.UTF-8"}
	env = append(env, extra...)
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+c.Env[k])
	}
	keys = keys[:0]
	for k := range c.Credentials {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := c.Credentials[k](ctx)
		if err != nil {
			return nil, fmt.Errorf("box: credential %s could not be resolved", k)
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// capture keeps the first limit bytes written and streams them.
type capture struct {
	mu        *sync.Mutex
	buf       []byte
	limit     int
	truncated bool
	stream    int
	fn        func(int, []byte)
	held      *held
}

// held is stderr withheld from the stream while it may still be the
// backend's own report of a failure (see Proc.Hold).
type held struct {
	hold    func([]byte) bool
	holding bool
	errw    *capture
}

// release streams the withheld stderr and stops holding. Called with mu.
func (h *held) release() {
	if h.holding {
		h.holding = false
		if h.errw.fn != nil && len(h.errw.buf) > 0 {
			h.errw.fn(2, h.errw.buf)
		}
	}
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := c.limit - len(c.buf); len(p) > room {
		p, c.truncated = p[:max(room, 0)], true
	}
	if len(p) > 0 {
		c.buf = append(c.buf, p...)
		if h := c.held; h != nil && h.holding {
			if c.stream == 2 && h.hold(c.buf) {
				return n, nil
			}
			h.release()
			if c.stream == 2 {
				return n, nil // release streamed it
			}
		}
		if c.fn != nil {
			c.fn(c.stream, p)
		}
	}
	return n, nil
}

// Proc is one prepared run of a backend's host process.
type Proc struct {
	Cmd *exec.Cmd
	// Kill ends every process of the run (the cgroup, the container);
	// the process group of Cmd is killed in any case.
	Kill func()
	// OOM reports whether the memory limit killed a process.
	OOM func() bool
	// AfterStart, when set, runs right after the process starts; its
	// error kills the run (exit status 125, the message on stderr).
	AfterStart func() error
	// Hold, when set, says whether the stderr written so far (nothing
	// on stdout yet) may still be the backend's own report of a failure
	// to start the command; while it is, stderr is not streamed, and
	// Finish may rewrite it (what it leaves is streamed at the end).
	Hold func(stderr []byte) bool
	// Finish, when set, sees the Result before it is returned and may
	// rewrite it; its error is Run's.
	Finish func(res *box.Result) error
}

// Run runs p under c's timeout and ctx, and fills a Result. Its error is
// Proc.Finish's, or one wrapping box.ErrBackend when p.Cmd cannot start.
func Run(ctx context.Context, c *box.Command, p *Proc, start time.Time) (*box.Result, error) {
	l := c.Limits.WithDefaults()
	timeout := c.Timeout
	if timeout == 0 {
		timeout = box.DefaultTimeout
	}
	mu := &sync.Mutex{}
	out := &capture{mu: mu, limit: l.Output, stream: 1, fn: c.Stream}
	errw := &capture{mu: mu, limit: l.Output, stream: 2, fn: c.Stream}
	if p.Hold != nil {
		h := &held{hold: p.Hold, holding: true, errw: errw}
		out.held, errw.held = h, h
	}
	cmd := p.Cmd
	cmd.Stdout, cmd.Stderr = out, errw
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	// Output pipes held open by a stray process end the wait this long
	// after the kill.
	cmd.WaitDelay = 2 * time.Second
	res := &box.Result{}
	kill := func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if p.Kill != nil {
			p.Kill()
		}
	}
	if err := spawn.Start(cmd); err != nil {
		return nil, fmt.Errorf("%w: cannot start %s: %v", box.ErrBackend, cmd.Path, err)
	}
	if p.AfterStart != nil {
		if err := p.AfterStart(); err != nil {
			kill()
			cmd.Wait()
			res.ExitStatus = 125
			res.Stderr = err.Error()
			res.Duration = time.Since(start)
			return res, nil
		}
	}
	var timedOut, canceled bool
	timer := time.NewTimer(timeout)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-timer.C:
		timedOut = true
		kill()
		err = <-done
	case <-ctx.Done():
		canceled = true
		kill()
		err = <-done
	}
	timer.Stop()
	// Whatever is left of the tree (a daemonised grandchild) goes too.
	kill()
	res.ExitStatus = exitStatus(cmd, err)
	if p.OOM != nil && p.OOM() {
		res.KilledForMemory = true
	}
	switch {
	case timedOut:
		res.TimedOut, res.ExitStatus = true, 124
	case canceled:
		res.Canceled, res.ExitStatus = true, 137
	case res.KilledForMemory && res.ExitStatus == 0:
		res.ExitStatus = 137
	case !res.KilledForMemory && signaled(cmd):
		// The sandbox's own host process died of a signal nobody here
		// sent (the kills above come only on timeout or cancel).
		res.KilledExternally = true
	}
	mu.Lock()
	res.Stdout, res.StdoutTruncated = string(out.buf), out.truncated
	res.Stderr, res.StderrTruncated = string(errw.buf), errw.truncated
	holding := errw.held != nil && errw.held.holding
	mu.Unlock()
	if p.Finish != nil {
		if err := p.Finish(res); err != nil {
			return nil, err
		}
	}
	if holding && c.Stream != nil && res.Stderr != "" {
		c.Stream(2, []byte(res.Stderr))
	}
	res.Duration = time.Since(start)
	return res, nil
}

// signaled reports whether cmd's process was ended by a signal.
func signaled(cmd *exec.Cmd) bool {
	if cmd.ProcessState == nil {
		return false
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

func exitStatus(cmd *exec.Cmd, err error) int {
	st := cmd.ProcessState
	if st == nil {
		return 127
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return st.ExitCode()
}
