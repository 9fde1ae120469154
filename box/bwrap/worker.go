package bwrap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/internal/cgroup"
	"github.com/gloveboxhq/glovebox/box/internal/sbx"
	"github.com/gloveboxhq/glovebox/box/internal/seccomp"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// WorkerSpec is a long-lived process started with [Box.StartWorker]: a
// program that talks to its parent over its stdin and stdout (the
// executor's eval worker), rather than a command run to completion.
type WorkerSpec struct {
	// Argv is the program and its arguments, as seen inside the sandbox.
	Argv []string
	// ReadOnly lists host paths (files or directories) bound read-only
	// at the same path, beside the box's Config.ReadOnly ones.
	ReadOnly []string
	// Env is the program's whole environment (nothing of the parent's is
	// passed on).
	Env []string
	// Limits: Memory, Pids and CPUs go to a cgroup when one can be made;
	// Disk sizes /tmp and caps a file. Zero fields take box's defaults.
	// Without a cgroup, memory is not capped by an rlimit (a wasm
	// engine reserves far more address space than it uses); the caller
	// bounds it (the engine's own memory limit).
	Limits box.Limits
	// Stderr receives the program's stderr (and bwrap's own errors);
	// nil discards it.
	Stderr io.Writer
}

// Worker is a process started by [Box.StartWorker]. Write to Stdin, read
// from Stdout; Kill ends it and everything it started; Wait waits for it
// and releases its cgroup and directories. Call Wait exactly once.
type Worker struct {
	Stdin  io.WriteCloser
	Stdout io.ReadCloser
	// Enforced lists what holds for this worker, as box.Result.Enforced
	// does ("seccomp", "memory:cgroup", …).
	Enforced []string

	cmd   *exec.Cmd
	group *cgroup.Group
	w     *sbx.Workdir
	once  sync.Once
}

// Pid is the host process id of the worker's bwrap process.
func (w *Worker) Pid() int { return w.cmd.Process.Pid }

// Kill ends the worker: SIGKILL to every process of its cgroup when it
// has one, and to its process group (bwrap then takes the sandbox's PID
// namespace down with it: --die-with-parent). Safe to call any time, any
// number of times.
func (w *Worker) Kill() {
	if w.group != nil {
		w.group.Kill()
	}
	syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
}

// Wait waits for the worker to exit and removes what it left on the host.
// The error is exec's (*exec.ExitError when it did not exit 0).
func (w *Worker) Wait() error {
	err := w.cmd.Wait()
	w.once.Do(func() {
		if w.group != nil {
			w.group.Kill() // strays of a worker whose bwrap died first
			w.group.Remove()
		}
		w.w.Remove()
	})
	return err
}

// StartWorker starts spec in a fresh sandbox with the same hardening as
// [Box.Run]: every namespace unshared (no network), no capabilities, the
// seccomp filter, a read-only root, a private /tmp, rlimits, a cgroup when
// one can be made, and --die-with-parent. Errors: the seccomp filter or the
// host directory could not be made, or bwrap could not start.
func (b *Box) StartWorker(spec WorkerSpec) (*Worker, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("%w: a worker needs a program", box.ErrInvalidCommand)
	}
	for _, p := range spec.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%w: read-only path %q is not absolute", box.ErrInvalidCommand, p)
		}
	}
	filter, err := seccomp.Bytes()
	if err != nil {
		return nil, fmt.Errorf("box: worker: no seccomp filter: %w", err)
	}
	l := spec.Limits.WithDefaults()
	wd, err := sbx.Prepare(&box.Command{})
	if err != nil {
		return nil, fmt.Errorf("box: preparing the worker's directory: %w", err)
	}
	w := &Worker{w: wd}
	group, gerr := cgroup.New(filepath.Base(wd.Root), cgroup.Limits{Memory: l.Memory, Pids: l.Pids, CPUs: l.CPUs})
	if gerr == nil {
		w.group = group
		w.Enforced = append(w.Enforced, group.Enforced...)
	}
	fail := func(err error) (*Worker, error) {
		if w.group != nil {
			w.group.Remove()
		}
		wd.Remove()
		return nil, err
	}
	args := []string{
		"--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
		"--uid", strconv.Itoa(b.cfg.UID), "--gid", strconv.Itoa(b.cfg.GID),
		"--cap-drop", "ALL", "--hostname", "glovebox", "--disable-userns",
		"--size", strconv.FormatInt(l.Disk, 10), "--tmpfs", "/tmp",
	}
	args = append(args, b.rootArgs()...)
	etcA, etcFiles, err := b.etcArgs(5) // after the filter (3) and the options (4)
	if err != nil {
		return fail(err)
	}
	defer closeAll(etcFiles)
	args = append(args, etcA...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp")
	for _, p := range spec.ReadOnly {
		args = append(args, "--ro-bind", p, p)
	}
	args = append(args, "--remount-ro", "/", "--seccomp", "3")
	w.Enforced = append(w.Enforced, "seccomp", "network:none", "disk:tmpfs+fsize")

	var script strings.Builder
	for _, f := range groupFiles(group, gerr) {
		fmt.Fprintf(&script, "echo $$ > '%s' || exit 125\n", f)
	}
	script.WriteString("ulimit -c 0\n")
	fmt.Fprintf(&script, "ulimit -f %d\n", l.Disk/512)
	script.WriteString("unset PWD OLDPWD\n") // see Run
	script.WriteString(`exec "$@"` + "\n")
	cmd := exec.Command("/bin/sh", "-c", script.String(), "sh", b.bwrap)
	cmd.Dir = "/"
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stderr = spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	filterR, filterW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	argsR, argsW, err := os.Pipe()
	if err != nil {
		filterR.Close()
		filterW.Close()
		return fail(err)
	}
	defer filterR.Close()
	defer argsR.Close()
	cmd.ExtraFiles = append([]*os.File{filterR, argsR}, etcFiles...)
	cmd.Args = append(cmd.Args, "--args", "4", "--")
	cmd.Args = append(cmd.Args, spec.Argv...)
	if w.Stdin, err = cmd.StdinPipe(); err != nil {
		filterW.Close()
		argsW.Close()
		return fail(err)
	}
	if w.Stdout, err = cmd.StdoutPipe(); err != nil {
		filterW.Close()
		argsW.Close()
		return fail(err)
	}
	go func() { filterW.Write(filter); filterW.Close() }()
	go func() {
		for _, a := range args {
			argsW.WriteString(a)
			argsW.Write([]byte{0})
		}
		argsW.Close()
	}()
	if err := spawn.Start(cmd); err != nil {
		filterW.Close()
		argsW.Close()
		return fail(errors.Join(errors.New("box: starting bwrap"), err))
	}
	w.cmd = cmd
	return w, nil
}
