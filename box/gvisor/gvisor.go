// Package gvisor runs commands under gVisor (runsc): a user-space kernel
// between the command and the host. Each run gets an OCI bundle generated
// from the Command: a read-only root file system holding the host's /usr
// read-only, a private /tmp (tmpfs) and working directory, no
// capabilities, no-new-privileges, a non-root user, no network
// (--network=none), and the box package's file policy (no setuid or
// setgid bits, no device nodes) as an OCI seccomp filter the sentry
// applies (--oci-seccomp). With Command.Tools, the tool socket is bound read-only
// at /run/glovebox and runsc may open (connect to) host unix sockets only.
// The timeout kills the sandbox (runsc kill, then delete).
//
// # Limits
//
// The process limit is the sentry's RLIMIT_NPROC: fork and clone fail with
// EAGAIN past Limits.Pids, as on Linux. Memory is a host cgroup made for
// the run and named in the spec (linux.cgroupsPath); runsc joins it
// without owning it, so after the run its OOM-kill count (memory.events,
// or memory.oom_control on cgroup v1) tells a memory kill: Result has
// KilledForMemory and exit status 137. The same group holds a host pids
// ceiling ([HostPids]) as a backstop. Where this process cannot make a
// cgroup, runsc makes its own from the spec's resources and removes it
// with the sandbox: the limit holds but a kill is not told apart
// (Result.Enforced says "memory:oci" instead of "memory:cgroup").
//
// # Network allowlist
//
// With Command.Network.Allow (and Config.Egress), the run gets a fresh
// network namespace made by this process, holding only loopback and the
// egress proxy on 127.0.0.1:3128, which applies httptool's policy. The
// sandbox joins that namespace and uses it through the host kernel's
// sockets (runsc --network=host): its only interface is that loopback,
// there is no DNS, and HTTP_PROXY/HTTPS_PROXY point at the proxy. This
// needs CAP_SYS_ADMIN (root), as runsc itself does here. The cost: the
// guest's socket calls reach the host kernel (hostinet) instead of
// gVisor's netstack, for this run only.
//
// # Failures
//
// runsc exits 128 when it fails itself, and writes why on the stderr it
// shares with the command; Run tells the two apart by a log file only
// "runsc run" writes. A program that is not found or cannot be executed
// gives the Result the shell's 127 or 126 and the bwrap box's stderr line;
// any other runsc failure (no root or delegated cgroup, an unknown
// platform, a bad bundle) is an error wrapping box.ErrBackend that quotes
// runsc's first error and says what to do. A command's own exit 128
// stays its own. When the sandbox process dies before runsc has the
// container's exit (killed from outside: an operator's kill -9, the
// host's OOM killer), runsc's own log of the run says so and the Result
// has KilledExternally. Leftover run directories and cgroups are swept as
// the bwrap box's are (see its package comment).
package gvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/internal/cgroup"
	"github.com/gloveboxhq/glovebox/box/internal/sbx"
	"github.com/gloveboxhq/glovebox/box/internal/seccomp"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Config is a gVisor box's set-up; its zero value is the default.
type Config struct {
	// Path is the runsc binary; empty means "runsc" in PATH.
	Path string
	// Platform is runsc's --platform; empty leaves runsc's default
	// (ptrace on Debian's 2022 package; systrap on newer ones; kvm where
	// /dev/kvm works).
	Platform string
	// ReadOnly lists host directories bound read-only; empty means /usr,
	// /etc/alternatives and /etc/ssl (those that exist).
	ReadOnly []string
	// UID and GID run the command; zero means 65534.
	UID, GID int
	// Egress makes the dialer of one run's egress proxy from the
	// Command's allowlist (egress.HTTPTool gives httptool's rules, the
	// same policy the bwrap box and the wasm guest's HTTP functions
	// apply); nil means a Command with Network.Allow is refused with
	// ErrUnsupported. See the package comment for how the proxy is the
	// sandbox's only way out.
	Egress EgressFunc
}

// EgressFunc is box.EgressFunc (kept under this name for callers of this
// package).
type EgressFunc = box.EgressFunc

// Box is a gVisor box; make it with [New].
type Box struct {
	runsc string
	cfg   Config
}

var _ box.Box = (*Box)(nil)

// New returns a gVisor box, or an error wrapping box.ErrUnavailable when
// runsc is not installed.
func New(cfg Config) (*Box, error) {
	p := cfg.Path
	if p == "" {
		p = "runsc"
	}
	path, err := exec.LookPath(p)
	if err != nil {
		return nil, fmt.Errorf("%w: gVisor (runsc) not found: %v", box.ErrUnavailable, err)
	}
	if cfg.UID == 0 {
		cfg.UID = 65534
	}
	if cfg.GID == 0 {
		cfg.GID = 65534
	}
	return &Box{runsc: path, cfg: cfg}, nil
}

// Posture is (gvisor, host).
func (b *Box) Posture() box.Posture {
	return box.Posture{Backend: "gvisor", Isolation: box.IsolationGVisor, Trust: box.TrustHost}
}

// Spec builds the OCI runtime spec (config.json) for c with the given
// environment and working directory on the host. Exported for tests and
// for callers who run the bundle with their own runtime.
func (b *Box) Spec(c *box.Command, env []string, work string, etc string) map[string]any {
	l := c.Limits.WithDefaults()
	mounts := []any{
		map[string]any{"destination": "/proc", "type": "proc", "source": "proc"},
		map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
			"options": []string{"nosuid", "nodev", fmt.Sprintf("size=%d", l.Disk)}},
		map[string]any{"destination": sbx.GuestWork, "type": "bind", "source": work, "options": []string{"rbind", "rw", "nosuid", "nodev"}},
	}
	ro := b.cfg.ReadOnly
	if len(ro) == 0 {
		ro = []string{"/usr", "/etc/alternatives", "/etc/ssl"}
	}
	for _, d := range ro {
		if _, err := os.Stat(d); err == nil {
			mounts = append(mounts, map[string]any{"destination": d, "type": "bind", "source": d, "options": []string{"rbind", "ro"}})
		}
	}
	for _, f := range []string{"passwd", "group", "hosts"} {
		mounts = append(mounts, map[string]any{"destination": "/etc/" + f, "type": "bind", "source": filepath.Join(etc, f), "options": []string{"bind", "ro"}})
	}
	for _, m := range c.Mounts {
		mode := "ro"
		if m.Writable {
			mode = "rw"
		}
		mounts = append(mounts, map[string]any{"destination": m.GuestPath, "type": "bind", "source": m.HostPath, "options": []string{"rbind", mode, "nosuid", "nodev"}})
	}
	linux := map[string]any{
		"namespaces": []any{
			map[string]any{"type": "pid"}, map[string]any{"type": "network"}, map[string]any{"type": "ipc"},
			map[string]any{"type": "uts"}, map[string]any{"type": "mount"},
		},
		"resources": map[string]any{
			"memory": map[string]any{"limit": l.Memory},
			"pids":   map[string]any{"limit": HostPids(l.Pids)},
		},
	}
	// The box package's file-mode policy (no set-user-ID or set-group-ID
	// bits), applied by the sentry (runsc --oci-seccomp).
	if f := seccomp.OCI(); f != nil {
		linux["seccomp"] = f
	}
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal":        false,
			"user":            map[string]any{"uid": b.cfg.UID, "gid": b.cfg.GID},
			"args":            c.ArgvOrShell(),
			"env":             env,
			"cwd":             sbx.GuestWork,
			"capabilities":    map[string]any{},
			"noNewPrivileges": true,
			"rlimits": []any{
				map[string]any{"type": "RLIMIT_CORE", "hard": 0, "soft": 0},
				map[string]any{"type": "RLIMIT_FSIZE", "hard": l.Disk, "soft": l.Disk},
				map[string]any{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
				// The sentry enforces RLIMIT_NPROC itself: fork and clone
				// fail with EAGAIN past it, as on Linux. All of the
				// command's processes run as one uid in a fresh sandbox,
				// so this is the run's process (task) limit.
				map[string]any{"type": "RLIMIT_NPROC", "hard": l.Pids, "soft": l.Pids},
			},
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "glovebox",
		"mounts":   mounts,
		"linux":    linux,
	}
}

// HostPids is the host cgroup's pids.max for a sandbox whose command may
// have pids processes: a backstop on the host tasks runsc uses (the
// sentry's ~40 threads, the gofer, and under the ptrace platform stub
// processes and threads per guest address space and sentry thread),
// 32×pids+512. Measured here (runsc 2022-12, ptrace): a shell fork bomb
// held to 64 guest processes peaked at 1515 host tasks, to 128 at 2607.
// The guest's own limit is RLIMIT_NPROC, which the sentry enforces;
// hitting the host ceiling instead ends the whole sandbox (the sentry's Go
// runtime cannot make a thread and exits).
func HostPids(pids int) int { return 32*pids + 512 }

// Run runs c in a fresh gVisor sandbox. See [box.Box].
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
	bundle := filepath.Join(w.Root, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"usr", "etc", "tmp", "proc", "dev", "work", "run"} {
		os.MkdirAll(filepath.Join(rootfs, d), 0o755)
	}
	for _, m := range c.Mounts {
		os.MkdirAll(filepath.Join(rootfs, filepath.FromSlash(m.GuestPath)), 0o755)
	}
	for _, ln := range []string{"/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin"} {
		if t, err := os.Readlink(ln); err == nil && strings.HasPrefix(filepath.Clean(filepath.Join("/", t)), "/usr/") {
			os.Symlink(t, filepath.Join(rootfs, ln))
		}
	}
	etc := filepath.Join(w.Root, "etc")
	os.MkdirAll(etc, 0o755)
	os.WriteFile(filepath.Join(etc, "passwd"), fmt.Appendf(nil, "root:x:0:0:root:/root:/bin/sh\nsandbox:x:%d:%d:sandbox:%s:/bin/sh\n", b.cfg.UID, b.cfg.GID, sbx.GuestWork), 0o644)
	os.WriteFile(filepath.Join(etc, "group"), fmt.Appendf(nil, "root:x:0:\nsandbox:x:%d:\n", b.cfg.GID), 0o644)
	os.WriteFile(filepath.Join(etc, "hosts"), []byte("127.0.0.1 localhost glovebox\n"), 0o644)
	var extraEnv []string
	run := ""
	if c.Tools != nil {
		run = filepath.Join(w.Root, "run")
		if err := os.MkdirAll(run, 0o777); err != nil {
			return nil, err
		}
		os.Chmod(run, 0o777)
		stop, tenv, err := sbx.ServeTools(ctx, &c, run, sbx.GuestRun)
		if err != nil {
			return nil, err
		}
		defer stop()
		extraEnv = tenv
	}
	var netns *sbx.Netns
	if len(c.Network.Allow) > 0 {
		ns, cleanup, err := sbx.EgressNetns(ctx, b.cfg.Egress, &c)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		netns = ns
		extraEnv = append(extraEnv, sbx.ProxyEnv()...)
	}
	env, err := sbx.Env(ctx, &c, extraEnv...)
	if err != nil {
		return nil, err
	}
	specMap := b.Spec(&c, env, w.Work, etc)
	// A cgroup made here and named in the spec: runsc joins a group that
	// already exists without owning it (it sets no limits there and does
	// not delete it), so its memory.oom_control / memory.events can be
	// read after the sandbox ended, to tell a memory kill.
	group, gerr := cgroup.New(filepath.Base(w.Root), cgroup.Limits{Memory: l.Memory, Pids: HostPids(l.Pids), CPUs: l.CPUs})
	enforced := []string{"pids:rlimit-nproc", "network:none", "rootfs:ro"}
	if gerr == nil {
		defer group.Remove()
		specMap["linux"].(map[string]any)["cgroupsPath"] = group.Path()
		for _, e := range group.Enforced {
			if e == "pids:cgroup" {
				e = "pids:cgroup-backstop"
			}
			enforced = append(enforced, e)
		}
	} else {
		// runsc makes its own group from the spec's resources; it
		// removes it when the sandbox ends, so a memory kill cannot be
		// told from another SIGKILL.
		enforced = append(enforced, "memory:oci", "pids:oci-backstop")
	}
	if netns != nil {
		// The sandbox joins the namespace holding the proxy and uses
		// it through the host kernel's sockets (--network=host): its
		// only interface is that namespace's loopback.
		lin := specMap["linux"].(map[string]any)
		nss := lin["namespaces"].([]any)
		for i, n := range nss {
			if n.(map[string]any)["type"] == "network" {
				nss[i] = map[string]any{"type": "network", "path": netns.Path}
			}
		}
	}
	if run != "" {
		specMap["mounts"] = append(specMap["mounts"].([]any), map[string]any{"destination": sbx.GuestRun, "type": "bind", "source": run, "options": []string{"rbind", "ro"}})
	}
	spec, err := json.Marshal(specMap)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o600); err != nil {
		return nil, err
	}
	state := filepath.Join(w.Root, "state")
	os.MkdirAll(state, 0o700)
	id := "glovebox-" + filepath.Base(w.Root)
	logf := filepath.Join(w.Root, "runsc.log")
	global := []string{"--root", state, "--network=none", "--oci-seccomp"}
	if netns != nil {
		global[2] = "--network=host"
	}
	if run != "" {
		// The tool socket is a host unix socket: let the sandbox open
		// (connect to) it, and nothing more.
		global = append(global, "--host-uds=open")
	}
	if b.cfg.Platform != "" {
		global = append(global, "--platform="+b.cfg.Platform)
	}
	// runsc's own errors go to stderr, mixed with the command's, and to
	// this log, which only the run writes (kill and delete log elsewhere).
	// The run command's own info log (a few KiB: the sandbox's and the
	// gofer's are not written) tells a sandbox that died under runsc.
	runLog := filepath.Join(w.Root, "runsc-run.txt")
	cmd := exec.Command(b.runsc, append(append([]string{"--log", logf, "--log-format=json", "--debug-log", runLog, "--debug-command=run"}, global...), "run", "--bundle", bundle, id)...)
	kill := func() {
		spawn.Run(exec.Command(b.runsc, append(global, "kill", "--all", id, "KILL")...))
		spawn.Run(exec.Command(b.runsc, append(global, "delete", "--force", id)...))
	}
	p := &sbx.Proc{Cmd: cmd, Kill: kill}
	if gerr == nil {
		p.OOM = group.OOMKilled
	}
	p.Hold = mayBeRunscError
	p.Finish = func(res *box.Result) error {
		if !res.TimedOut && !res.Canceled && !res.KilledForMemory && sandboxLost(runLog) {
			res.KilledExternally = true
			return nil
		}
		if res.ExitStatus != 128 || res.TimedOut || res.Canceled {
			return nil
		}
		// runsc exits 128 when it fails itself; its log (only this
		// run's, only errors) then names why.
		msg := runscError(logf)
		if msg == "" {
			return nil
		}
		name, notFound, reason, ok := execFailure(msg)
		if !ok {
			return startError(msg)
		}
		if name == "" {
			name = c.ArgvOrShell()[0]
		}
		sbx.NotExecuted(res, name, notFound, reason)
		return nil
	}
	res, err := sbx.Run(ctx, &c, p, start)
	kill()
	if err != nil {
		return nil, err
	}
	res.Posture = b.Posture()
	if netns != nil {
		enforced[1] = "network:egress-proxy"
	}
	res.Enforced = enforced
	res.Outputs, res.OutputsTruncated = w.ReadOutputs(l.OutputFiles)
	if c.Tools != nil {
		res.ToolCalls = c.Tools.Transcript()
	}
	res.Duration = time.Since(start)
	return res, nil
}

// mayBeRunscError reports whether stderr so far may be runsc's own report
// of a failure: "running container: …", or a glog line ("W1201 04:11:17…").
func mayBeRunscError(e []byte) bool {
	if len(e) > 4096 {
		return false
	}
	if sbx.MayStart(e, "running container: ") {
		return true
	}
	const shape = "W0000 00:"
	for i := 0; i < len(e) && i < len(shape); i++ {
		switch shape[i] {
		case 'W':
			if e[i] != 'W' && e[i] != 'E' && e[i] != 'I' {
				return false
			}
		case '0':
			if e[i] < '0' || e[i] > '9' {
				return false
			}
		default:
			if e[i] != shape[i] {
				return false
			}
		}
	}
	return true
}

// sandboxLost reports whether runsc's run log f says the sandbox process
// ended before it reported the container's exit: runsc then falls back
// to the sandbox process's own status ("… Will try waiting on the sandbox
// process instead"), which is how a sentry killed from outside shows.
func sandboxLost(f string) bool {
	data, err := os.ReadFile(f)
	if err != nil || !strings.Contains(string(data), "Will try waiting on the sandbox process") {
		return false
	}
	// runsc also loses its control connection when the command, as the
	// container's init, kills itself: the sandbox then exits normally
	// with 128+N ("Exiting with status: 35072", 137<<8). Only a sandbox
	// process that a signal ended (a wait status with a signal in its low
	// bits) was killed from outside.
	m := reExitStatus.FindAllStringSubmatch(string(data), -1)
	if len(m) == 0 {
		return false
	}
	ws, err := strconv.Atoi(m[len(m)-1][1])
	return err == nil && ws&0x7f != 0
}

// reExitStatus finds runsc's last log line, the wait status it exits with.
var reExitStatus = regexp.MustCompile(`Exiting with status: (\d+)`)

// runscError is the first error runsc logged to the JSON log file f, or
// "" when there is none.
func runscError(f string) string {
	data, err := os.ReadFile(f)
	if err != nil {
		return ""
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	for {
		var e struct{ Msg, Level string }
		if dec.Decode(&e) != nil {
			return ""
		}
		if e.Level == "error" && e.Msg != "" {
			return e.Msg
		}
	}
}

var (
	reNotInPath = regexp.MustCompile(`error finding executable "([^"]*)" in PATH`)
	reLoad      = regexp.MustCompile(`creating process: failed to load ([^:]*): (.*)$`)
)

// execFailure reads a runsc error that is the command's program failing
// to execute: not found in PATH (name is the program), or failing to load
// (name "" means the caller's Argv[0]; notFound when it does not exist).
func execFailure(msg string) (name string, notFound bool, reason string, ok bool) {
	if m := reNotInPath.FindStringSubmatch(msg); m != nil {
		return m[1], true, "", true
	}
	if m := reLoad.FindStringSubmatch(msg); m != nil {
		return "", m[2] == "no such file or directory", m[2], true
	}
	return "", false, "", false
}

// startError is the error for runsc failing to start the sandbox: its
// first error line, shortened, and what to do.
func startError(msg string) error {
	for _, p := range []string{"running container: ", "starting container: ", "starting root container: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if len(msg) > 400 {
		msg = msg[:400] + "…"
	}
	hint := "check the runsc installation and this box's gvisor.Config (Path, Platform, ReadOnly)"
	low := strings.ToLower(msg)
	if strings.Contains(low, "cgroup") || strings.Contains(low, "permission denied") || strings.Contains(low, "operation not permitted") {
		hint = "gVisor here needs root, or a cgroup delegated to this user (cgroup v2 with the memory and pids controllers); run glovebox as root or use --box bwrap"
	}
	return fmt.Errorf("%w: gVisor (runsc) could not start the sandbox: %s; %s", box.ErrBackend, msg, hint)
}
