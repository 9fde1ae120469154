// Package container runs commands in hardened Docker or Podman containers
// through the engine's CLI: read-only root, every capability dropped,
// no-new-privileges, the engine's default seccomp profile (or a given
// one), no network (or, on podman, a namespace whose only way out is the
// egress proxy), pids/memory/CPU limits, a non-root user and a tmpfs
// /tmp. [Args] builds the exact argv; the engine is reached through an
// injectable [Runner], so the builder is tested without an engine.
package container

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/internal/sbx"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Config is a container box's set-up.
type Config struct {
	// Engine is "docker" or "podman" (the CLI run); empty means docker.
	Engine string
	// Image runs the command; required (e.g. "python:3.12-slim").
	Image string
	// User is the uid:gid inside; empty means 65534:65534.
	User string
	// SeccompProfile is a profile file's host path; empty keeps the
	// engine's default profile (never "unconfined").
	SeccompProfile string
	// Runner runs the engine CLI; nil means os/exec.
	Runner Runner
	// Egress makes the dialer of one run's egress proxy from the
	// Command's allowlist (egress.HTTPTool: httptool's policy, as in the
	// bwrap and gVisor boxes). Podman only: the container joins a fresh
	// network namespace holding only loopback and the proxy
	// (--network ns:PATH), with HTTP(S)_PROXY pointing there. Docker's CLI
	// cannot join a namespace by path, so an allowlist on docker is
	// refused with ErrUnsupported (a proxy container on an --internal
	// network would be the way there). nil: every allowlist is refused.
	Egress box.EgressFunc
}

// Runner starts the engine's CLI with argv (argv[0] is the engine) and
// returns the prepared process; tests inject a fake.
type Runner func(ctx context.Context, argv []string) *exec.Cmd

// Box is a hardened-container box; make it with [New].
type Box struct{ cfg Config }

var _ box.Box = (*Box)(nil)

// New checks cfg and returns a box. It does not contact the engine.
func New(cfg Config) (*Box, error) {
	if cfg.Engine == "" {
		cfg.Engine = "docker"
	}
	if cfg.Engine != "docker" && cfg.Engine != "podman" {
		return nil, fmt.Errorf("%w: engine %q (docker or podman)", box.ErrInvalidCommand, cfg.Engine)
	}
	if cfg.Image == "" {
		return nil, fmt.Errorf("%w: no image", box.ErrInvalidCommand)
	}
	if cfg.User == "" {
		cfg.User = "65534:65534"
	}
	return &Box{cfg: cfg}, nil
}

// Posture is (namespaces, host).
func (b *Box) Posture() box.Posture {
	return box.Posture{Backend: b.cfg.Engine, Isolation: box.IsolationNamespaces, Trust: box.TrustHost}
}

// Args returns the engine argv for c, with name the container's name,
// work the host working directory and envNames the variables passed by
// name (their values travel in the engine's environment, never in argv).
func (b *Box) Args(c *box.Command, name, work string, envNames []string) []string {
	return b.ArgsNetns(c, name, work, envNames, "")
}

// ArgsNetns is Args with the container joining the network namespace at
// netns (podman's --network ns:PATH) instead of --network none; empty
// netns is Args.
func (b *Box) ArgsNetns(c *box.Command, name, work string, envNames []string, netns string) []string {
	l := c.Limits.WithDefaults()
	network := "none"
	if netns != "" {
		network = "ns:" + netns
	}
	a := []string{b.cfg.Engine, "run", "--rm", "-i", "--name", name,
		"--read-only",
		"--cap-drop", "ALL",
		"--security-opt", "no-new-privileges",
	}
	if b.cfg.SeccompProfile != "" {
		a = append(a, "--security-opt", "seccomp="+b.cfg.SeccompProfile)
	}
	a = append(a,
		"--network", network,
		"--pids-limit", strconv.Itoa(l.Pids),
		"--memory", strconv.FormatInt(l.Memory, 10),
		"--memory-swap", strconv.FormatInt(l.Memory, 10),
		"--user", b.cfg.User,
		"--tmpfs", fmt.Sprintf("/tmp:rw,nosuid,nodev,noexec,size=%d", l.Disk),
		"--ulimit", "core=0",
		"--ulimit", fmt.Sprintf("fsize=%d", l.Disk),
		"-v", work+":"+sbx.GuestWork+":rw",
		"-w", sbx.GuestWork,
	)
	for _, m := range c.Mounts {
		mode := "ro"
		if m.Writable {
			mode = "rw"
		}
		a = append(a, "-v", m.HostPath+":"+m.GuestPath+":"+mode)
	}
	if l.CPUs > 0 {
		a = append(a, "--cpus", strconv.FormatFloat(l.CPUs, 'f', -1, 64))
	}
	if b.cfg.Engine == "podman" {
		a = append(a, "--userns", "auto")
	}
	sort.Strings(envNames)
	for _, k := range envNames {
		a = append(a, "-e", k)
	}
	a = append(a, "--", b.cfg.Image)
	return append(a, c.ArgvOrShell()...)
}

// Run runs c in a fresh container. See [box.Box].
func (b *Box) Run(ctx context.Context, c box.Command) (*box.Result, error) {
	start := time.Now()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Tools != nil {
		return nil, fmt.Errorf("%w: the container box has no tool socket yet", box.ErrUnsupported)
	}
	if len(c.Network.Allow) > 0 && (b.cfg.Egress == nil || b.cfg.Engine != "podman") {
		return nil, fmt.Errorf("%w: a network allowlist needs Config.Egress and podman (docker's CLI cannot join the proxy's network namespace)", box.ErrUnsupported)
	}
	run := b.cfg.Runner
	if run == nil {
		if _, err := exec.LookPath(b.cfg.Engine); err != nil {
			return nil, fmt.Errorf("%w: %s not found", box.ErrUnavailable, b.cfg.Engine)
		}
		run = func(ctx context.Context, argv []string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }
	}
	l := c.Limits.WithDefaults()
	w, err := sbx.Prepare(&c)
	if err != nil {
		return nil, err
	}
	defer w.Remove()
	var extraEnv []string
	netns := ""
	if len(c.Network.Allow) > 0 {
		ns, cleanup, err := sbx.EgressNetns(ctx, b.cfg.Egress, &c)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		netns = ns.Path
		extraEnv = sbx.ProxyEnv()
	}
	env, err := sbx.Env(ctx, &c, extraEnv...)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, kv := range env {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				names = append(names, kv[:i])
				break
			}
		}
	}
	name := "glovebox-" + time.Now().Format("150405") + "-" + strconv.Itoa(int(start.UnixNano()%1e6))
	cmd := run(ctx, b.ArgsNetns(&c, name, w.Work, names, netns))
	cmd.Env = env
	kill := func() { spawn.Run(run(context.Background(), []string{b.cfg.Engine, "rm", "-f", name})) }
	res, err := sbx.Run(ctx, &c, &sbx.Proc{Cmd: cmd, Kill: kill}, start)
	if err != nil {
		return nil, err
	}
	res.Posture = b.Posture()
	res.Outputs, res.OutputsTruncated = w.ReadOutputs(l.OutputFiles)
	res.Duration = time.Since(start)
	return res, nil
}
