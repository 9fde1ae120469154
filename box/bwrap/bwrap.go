// Package bwrap runs commands under bubblewrap: every namespace unshared
// (user, mount, PID, network, IPC, UTS, cgroup), a read-only view of the
// host's /usr, a private /tmp and working directory, a seccomp filter,
// rlimits, and cgroup limits when the host lets this process make a cgroup.
//
// # What the sandbox sees of the host
//
// No descriptor but stdin, stdout and stderr (see internal/spawn: one
// this process inherited without close-on-exec is closed in the child);
// no environment but the Command's; host name "glovebox"; /etc/passwd,
// group and hosts copied into the sandbox's own root. The mount table
// (/proc/self/mountinfo) names the host paths bound into the sandbox: the
// read-only directories, the Command's Mounts, and the working directory
// and tool socket directory, which come from the run's host directory
// (glovebox-run-* in the temp dir). The gVisor box's mount table names
// none.
//
// # What is enforced where
//
// Memory, process count and CPU quota come from a cgroup (v2 when this
// process's cgroup delegates the controllers, else the v1 hierarchies);
// without one, memory falls back to RLIMIT_AS and the process count is
// bounded only by the PID namespace and the timeout (RLIMIT_NPROC counts
// per host user and does not bind root). Result.Enforced lists what held
// for each run. Disk: /tmp is a tmpfs of Limits.Disk bytes and RLIMIT_FSIZE
// caps any one file at Limits.Disk; the working directory is a host
// directory, so its total is bounded by that per-file cap and the timeout.
//
// # Leftovers
//
// Each run's host directory (glovebox-run-* in the temp dir) holds a lock
// file the run keeps flocked, and the process that made the run's cgroup
// keeps each of its directories flocked, until the run ends: the kernel
// lets a lock go when its holder dies, however it dies. A run first
// sweeps, at most every ten seconds per process, what killed runs left:
// this user's run directories in its temp dir whose lock is free and that
// are over a minute old, and the glovebox cgroups over a minute old whose
// locks are free, whichever process or temp dir made them (what still
// runs in such a group is killed first). A live run, of this process or
// any other, is never touched. The gVisor box does the same.
package bwrap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/internal/cgroup"
	"github.com/gloveboxhq/glovebox/box/internal/sbx"
	"github.com/gloveboxhq/glovebox/box/internal/seccomp"
)

// Box is a bubblewrap box. The zero value is not usable: call [New].
type Box struct {
	bwrap string
	cfg   Config
}

// Config is a bubblewrap box's set-up. Its zero value is the default.
type Config struct {
	// Path is the bwrap binary; empty means "bwrap" looked up in PATH.
	Path string
	// ReadOnly lists host directories bound read-only at the same path;
	// empty means /usr, /etc/alternatives, /etc/ld.so.cache and
	// /etc/ssl (the ones that exist). Host top-level symlinks into /usr
	// (/bin, /lib, /lib64, /sbin on a merged-/usr system) are recreated.
	ReadOnly []string
	// UID and GID are the command's ids inside the user namespace; zero
	// means 65534 (nobody). The guest holds no capabilities either way.
	UID, GID int
	// Egress makes the dialer of one run's egress proxy from the
	// Command's allowlist (egress.HTTPTool gives httptool's rules); nil
	// means a Command with Network.Allow is refused with ErrUnsupported.
	// The proxy listens on 127.0.0.1:3128 inside the sandbox's own
	// network namespace, its only way out; HTTP_PROXY and HTTPS_PROXY
	// point there.
	Egress EgressFunc
}

// EgressFunc is box.EgressFunc (kept under this name for callers of this
// package).
type EgressFunc = box.EgressFunc

var _ box.Box = (*Box)(nil)

// New returns a bubblewrap box, or an error wrapping box.ErrUnavailable
// when bwrap is not installed.
func New(cfg Config) (*Box, error) {
	p := cfg.Path
	if p == "" {
		p = "bwrap"
	}
	path, err := exec.LookPath(p)
	if err != nil {
		return nil, fmt.Errorf("%w: bubblewrap (bwrap) not found: %v", box.ErrUnavailable, err)
	}
	if cfg.UID == 0 {
		cfg.UID = 65534
	}
	if cfg.GID == 0 {
		cfg.GID = 65534
	}
	return &Box{bwrap: path, cfg: cfg}, nil
}

// Posture is (namespaces, host).
func (b *Box) Posture() box.Posture {
	return box.Posture{Backend: "bwrap", Isolation: box.IsolationNamespaces, Trust: box.TrustHost}
}

// Run runs c in a fresh sandbox. See [box.Box].
func (b *Box) Run(ctx context.Context, c box.Command) (*box.Result, error) {
	start := time.Now()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.Network.Allow) > 0 && b.cfg.Egress == nil {
		return nil, fmt.Errorf("%w: network allowlist without an egress proxy", box.ErrUnsupported)
	}
	if err := sbx.CheckMounts(&c); err != nil {
		return nil, err
	}
	l := c.Limits.WithDefaults()
	w, err := sbx.Prepare(&c)
	if err != nil {
		return nil, fmt.Errorf("box: preparing the working directory: %w", err)
	}
	defer w.Remove()

	var enforced []string
	group, gerr := cgroup.New(filepath.Base(w.Root), cgroup.Limits{Memory: l.Memory, Pids: l.Pids, CPUs: l.CPUs})
	if gerr == nil {
		defer group.Remove()
		enforced = append(enforced, group.Enforced...)
	}
	has := func(s string) bool {
		for _, e := range enforced {
			if e == s {
				return true
			}
		}
		return false
	}

	filter, ferr := seccomp.Bytes()
	args := []string{
		"--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
		"--uid", strconv.Itoa(b.cfg.UID), "--gid", strconv.Itoa(b.cfg.GID),
		"--cap-drop", "ALL", "--hostname", "glovebox", "--disable-userns",
	}
	// /tmp first, so a configured read-only directory under /tmp shows.
	args = append(args, "--size", strconv.FormatInt(l.Disk, 10), "--tmpfs", "/tmp")
	args = append(args, b.rootArgs()...)
	// The /etc files come through descriptors after the seccomp filter's
	// (3) and the egress proxy's (4 and 5).
	etcFd := 4
	if len(c.Network.Allow) > 0 {
		etcFd = 6
	}
	etcA, etcFiles, err := b.etcArgs(etcFd)
	if err != nil {
		return nil, err
	}
	defer closeAll(etcFiles)
	args = append(args, etcA...)
	args = append(args,
		"--proc", "/proc", "--dev", "/dev",
		"--bind", w.Work, sbx.GuestWork, "--chdir", sbx.GuestWork,
	)
	for _, m := range c.Mounts {
		op := "--ro-bind"
		if m.Writable {
			op = "--bind"
		}
		args = append(args, op, m.HostPath, m.GuestPath)
	}
	var extraEnv []string
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	if c.Tools != nil {
		run := filepath.Join(w.Root, "run")
		if err := os.MkdirAll(run, 0o777); err != nil {
			return nil, err
		}
		os.Chmod(run, 0o777)
		stop, env, err := sbx.ServeTools(ctx, &c, run, sbx.GuestRun)
		if err != nil {
			return nil, err
		}
		stops = append(stops, stop)
		extraEnv = append(extraEnv, env...)
		args = append(args, "--ro-bind", run, sbx.GuestRun)
	}
	args = append(args, "--remount-ro", "/")
	if ferr == nil {
		args = append(args, "--seccomp", "3")
		enforced = append(enforced, "seccomp")
	}
	var eg *egressRun
	if len(c.Network.Allow) > 0 {
		dial, release, err := b.cfg.Egress(c.Network.Allow)
		if err != nil {
			return nil, fmt.Errorf("box: egress proxy: %w", err)
		}
		defer release()
		creds, err := sbx.ProxyCreds(ctx, &c)
		if err != nil {
			return nil, err
		}
		eg = &egressRun{dial: dial, creds: creds, inspect: c.Network.Inspect}
		args = append(args, "--info-fd", "4", "--block-fd", "5")
		extraEnv = append(extraEnv, sbx.ProxyEnv()...)
		enforced = append(enforced, "network:egress-proxy")
	}

	env, err := sbx.Env(ctx, &c, extraEnv...)
	if err != nil {
		return nil, err
	}

	// A shell joins the cgroup and sets the rlimits, then becomes bwrap:
	// every process of the run starts inside the group.
	var script strings.Builder
	for _, f := range groupFiles(group, gerr) {
		fmt.Fprintf(&script, "echo $$ > '%s' || exit 125\n", f)
	}
	script.WriteString("ulimit -c 0\n")
	fmt.Fprintf(&script, "ulimit -f %d\n", l.Disk/512)
	enforced = append(enforced, "disk:tmpfs+fsize")
	if !has("memory:cgroup") {
		fmt.Fprintf(&script, "ulimit -v %d\n", l.Memory/1024)
		enforced = append(enforced, "memory:rlimit-as")
	}
	// The shell put its working directory in PWD; bwrap is the sandbox's
	// first process, and its environment shows there.
	script.WriteString("unset PWD OLDPWD\n")
	script.WriteString(`exec "$@"` + "\n")
	// bwrap's options (host paths of the run's directories among them)
	// travel through a pipe (--args), so the sandbox's /proc/1/cmdline
	// reads "bwrap --args N -- ARGV" and names nothing of the host.
	cmd := exec.Command("/bin/sh", "-c", script.String(), "sh", b.bwrap)
	cmd.Env = env
	cmd.Dir = "/"
	filterR, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() { wr.Write(filter); wr.Close() }()
	defer filterR.Close()
	cmd.ExtraFiles = []*os.File{filterR}
	p := &sbx.Proc{Cmd: cmd}
	if eg != nil {
		if err := eg.prepare(cmd); err != nil {
			return nil, err
		}
		defer eg.close()
		p.AfterStart = func() error { return eg.start(ctx) }
	}
	if len(cmd.ExtraFiles)+3 != etcFd {
		return nil, fmt.Errorf("box: bwrap: the /etc files' descriptors would be %d, not %d", len(cmd.ExtraFiles)+3, etcFd)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, etcFiles...)
	argsR, argsW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer argsR.Close()
	cmd.ExtraFiles = append(cmd.ExtraFiles, argsR)
	cmd.Args = append(cmd.Args, "--args", strconv.Itoa(2+len(cmd.ExtraFiles)), "--")
	cmd.Args = append(cmd.Args, c.ArgvOrShell()...)
	go func() {
		for _, a := range args {
			argsW.WriteString(a)
			argsW.Write([]byte{0})
		}
		argsW.Close()
	}()
	if gerr == nil {
		p.Kill, p.OOM = group.Kill, group.OOMKilled
	}
	name := c.ArgvOrShell()[0]
	report := "bwrap: execvp " + name + ": "
	p.Hold = func(e []byte) bool { return len(e) <= len(report)+64 && sbx.MayStart(e, report) }
	p.Finish = func(res *box.Result) error { execFailure(res, name); return nil }
	res, err := sbx.Run(ctx, &c, p, start)
	if err != nil {
		return nil, err
	}
	res.Posture = b.Posture()
	res.Enforced = enforced
	res.Outputs, res.OutputsTruncated = w.ReadOutputs(l.OutputFiles)
	if c.Tools != nil {
		for _, s := range stops {
			s()
		}
		stops = nil
		res.ToolCalls = c.Tools.Transcript()
	}
	res.Duration = time.Since(start)
	return res, nil
}

// execFailure turns bwrap's own report of a failed execvp of the command
// (exit status 1 and the single stderr line "bwrap: execvp NAME: REASON",
// nothing on stdout) into the shell's 127 or 126; see sbx.NotExecuted.
func execFailure(res *box.Result, name string) {
	if res.ExitStatus != 1 || res.TimedOut || res.Canceled || res.Stdout != "" {
		return
	}
	reason, ok := strings.CutPrefix(res.Stderr, "bwrap: execvp "+name+": ")
	reason, nl := strings.CutSuffix(reason, "\n")
	if !ok || !nl || strings.Contains(reason, "\n") {
		return
	}
	sbx.NotExecuted(res, name, reason == "No such file or directory", reason)
}

func groupFiles(g *cgroup.Group, err error) []string {
	if err != nil {
		return nil
	}
	return g.ProcsFiles()
}

// rootArgs binds the read-only host directories.
func (b *Box) rootArgs() []string {
	var args []string
	ro := b.cfg.ReadOnly
	if len(ro) == 0 {
		ro = []string{"/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/ssl"}
	}
	for _, d := range ro {
		if _, err := os.Stat(d); err == nil {
			args = append(args, "--ro-bind", d, d)
		}
	}
	for _, l := range []string{"/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin"} {
		if t, err := os.Readlink(l); err == nil && strings.HasPrefix(filepath.Clean(filepath.Join("/", t)), "/usr/") {
			args = append(args, "--symlink", t, l)
		}
	}
	return args
}

// etcArgs makes /etc/passwd and /etc/group naming the guest's ids (so
// tools that look the user up, Python's getpass or Ruby's Etc, work) and
// /etc/hosts. bwrap copies each from a pipe (descriptors first, first+1,
// first+2 in the child: the caller passes files in that order) into the
// sandbox's own root, so no host path of them shows in its mount table.
func (b *Box) etcArgs(first int) ([]string, []*os.File, error) {
	contents := []struct{ name, data string }{
		{"passwd", fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nsandbox:x:%d:%d:sandbox:%s:/bin/sh\n", b.cfg.UID, b.cfg.GID, sbx.GuestWork)},
		{"group", fmt.Sprintf("root:x:0:\nsandbox:x:%d:\n", b.cfg.GID)},
		{"hosts", "127.0.0.1 localhost glovebox\n::1 localhost\n"},
	}
	var args []string
	var files []*os.File
	for i, c := range contents {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(files)
			return nil, nil, err
		}
		_, err = w.WriteString(c.data) // a few bytes: the pipe holds them
		w.Close()
		if err != nil {
			r.Close()
			closeAll(files)
			return nil, nil, err
		}
		files = append(files, r)
		args = append(args, "--perms", "0644", "--file", strconv.Itoa(first+i), "/etc/"+c.name)
	}
	return args, files, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
