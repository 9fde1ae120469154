package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/httptool"
)

// boxProfile is a profile file's box section, read by glovebox run (eval
// and repl accept the section and leave it alone). Every key has a run
// flag; a flag given replaces the key (env, files and credentials add to
// the profile's, a flag winning for the same name).
type boxProfile struct {
	Backend string            `yaml:"backend"`
	Network []string          `yaml:"network"`
	Timeout string            `yaml:"timeout"`
	Memory  string            `yaml:"memory"`
	Pids    string            `yaml:"pids"`
	CPUs    string            `yaml:"cpus"`
	Disk    string            `yaml:"disk"`
	Output  string            `yaml:"output"`
	Env     map[string]string `yaml:"env"`
	Files   map[string]string `yaml:"files"`
	Mounts  []struct {
		Host     string `yaml:"host"`
		Guest    string `yaml:"guest"`
		Writable bool   `yaml:"writable"`
	} `yaml:"mounts"`
	Credentials []struct {
		Host   string `yaml:"host"`
		Env    string `yaml:"env"`
		Header string `yaml:"header"`
		TLS    *bool  `yaml:"tls"`
	} `yaml:"credentials"`
	// The settings of the docker, podman, firecracker and e2b backends
	// (run_backends.go).
	Image    string `yaml:"image"`
	Kernel   string `yaml:"kernel"`
	Rootfs   string `yaml:"rootfs"`
	Template string `yaml:"template"`
	E2BURL   string `yaml:"e2b_url"`
}

// boxProfileKeys documents the box section (appended to profileKeys).
var boxProfileKeys = []struct{ key, flag, doc string }{
	{"box.backend", "--box", "run's sandbox: bwrap, gvisor, docker, podman, firecracker, e2b or null (bwrap)"},
	{"box.network", "--network allow:", "hosts run's command may reach over HTTP(S) through the egress proxy (list; none)"},
	{"box.timeout", "--timeout", "run's wall-clock limit (30s)"},
	{"box.memory", "--memory", "run's memory limit (512MiB; at least 1MiB)"},
	{"box.pids", "--pids", "run's process limit (128)"},
	{"box.cpus", "--cpus", "run's CPU quota in cores (none)"},
	{"box.disk", "--disk", "bytes run's /tmp and any one file may hold (256MiB)"},
	{"box.output", "--output-limit", "run's stdout and stderr bytes kept, each (1MiB)"},
	{"box.env", "--env", "run's environment (map; nothing else is passed)"},
	{"box.files", "--file", "files put in run's working directory: NAME: host path (map; relative to the profile file)"},
	{"box.mounts[].host", "--mount HOST:", "host directory bound into run's sandbox (relative to the profile file)"},
	{"box.mounts[].guest", "--mount :GUEST", "where the command sees it, such as /data (not /usr, /etc, /tmp, /work, ...)"},
	{"box.mounts[].writable", "--mount ::rw", "the command may write (false)"},
	{"box.credentials[].host", "--credential HOST=", "a box.network host whose requests get a header from the proxy"},
	{"box.credentials[].env", "--credential =VAR", "glovebox's environment variable holding the header's value"},
	{"box.credentials[].header", "", "the header (Authorization)"},
	{"box.credentials[].tls", "--credential http://", "the proxy speaks HTTPS to the host (true)"},
}

// newBox makes the box named by --box, its egress proxy dialing with
// base's rules (the --http-port, --http-trust and --http-allow-ip-literals
// settings; the hosts come from --network).
func newBox(name string, base httptool.Config, other backendFlags) (box.Box, error) {
	if b, ok, err := newOtherBox(name, base, other); ok { // run_backends.go
		return b, err
	}
	switch name {
	case "bwrap", "bubblewrap":
		return bwrap.New(bwrap.Config{Egress: egress.HTTPTool(base)})
	case "gvisor", "runsc":
		return gvisor.New(gvisor.Config{Egress: egress.HTTPTool(base)})
	case "null":
		return box.Null{}, nil
	}
	return nil, usageError{fmt.Errorf("--box %q: want bwrap, gvisor, docker, podman, firecracker, e2b or null", name)}
}

// runFlags are glovebox run's flags.
type runFlags struct {
	boxName, network, timeout, memory, pids, cpus, disk, output string
	files, envs, creds, mounts                                  []string
	asJSON                                                      bool
	outputsDir, profile                                         string
	http                                                        httpFlags
	mcp                                                         mcpFlags
	backend                                                     backendFlags
}

func runCmd() *cobra.Command {
	var r runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] [--] ARGV...",
		Short: "Run a command in an OS-level sandbox (bubblewrap, gVisor) and print what it did",
		Long: `Run a command in a fresh OS-level sandbox. ARGV is executed directly (no
shell); use "sh -c '...'" for shell syntax. Flags go before the command:
everything from the first argument that is not a flag (or after --) is
the command's. The command sees only the environment given with --env, no
network unless --network allow:HOST, a read-only /usr, a private /tmp and
a fresh working directory holding the --file files, and the --mount
directories (read-only unless :rw); files it leaves in ./outputs are
listed (and kept with --outputs-dir).

Tools: --http-allow gives the command the HTTP tool and --mcp-server /
--mcp-url the tools of MCP servers, as for eval; from inside, Python calls
them with "from glovebox_tools import NAME", Ruby with
GloveboxTools.NAME after require "glovebox_tools", a shell with
"glovebox tool NAME --json ARGS" (glovebox puts itself, read-only, at
/opt/glovebox/bin/glovebox, on PATH unless --env sets PATH); the
transcript is in --json's tool_calls.

--network allow:HOST gives an HTTP(S) proxy applying the HTTP tool's rules
(ports 80 and 443, no private or loopback addresses, no IP literals), which
--http-port, --http-trust and --http-allow-ip-literals relax as for eval.
--credential HOST=VAR (credentials proxy mode): the proxy adds
"Authorization: $VAR" to the command's requests for http://HOST/... and
speaks HTTPS to HOST (http://HOST=VAR: plain HTTP); the command never sees
the value.

--profile reads the file's box section (and its http and mcp_servers
sections for tools); see the profile keys in eval --help.

Exit status: the command's (124 on timeout, 137 when killed for memory,
127 when the command is not found, 126 when it cannot be executed, as in
the shell), or 2 for usage or host errors (the sandbox failing to
start included: gVisor without root, say). With --json, one JSON object
describes the result (stdout, stderr, exit_status, timed_out, killed_for_memory,
killed_externally (something outside glovebox killed the sandbox: exit 128+N),
duration_ms, backend, isolation, trust, off_host, outputs, tool_calls,
enforced).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("no command: give it after the flags, such as glovebox run --box bwrap -- python3 -c 'print(1)'")}
			}
			if strings.HasPrefix(args[0], "-") {
				return usageError{fmt.Errorf("the command %q looks like a flag: glovebox run's flags go before --, the command after it", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return r.run(cmd.Flags(), args) },
	}
	f := cmd.Flags()
	// The command's own flags (python3 -c ...) are never taken for run's.
	f.SetInterspersed(false)
	f.StringVar(&r.boxName, "box", "bwrap", "the sandbox: bwrap, gvisor, docker, podman (--image), firecracker (--kernel, --rootfs), e2b ($E2B_API_KEY) or null")
	f.StringArrayVar(&r.files, "file", nil, "NAME=PATH: put the host file PATH in the working directory as NAME (repeatable)")
	f.StringArrayVar(&r.mounts, "mount", nil, "HOST:GUEST[:rw]: bind a host directory at GUEST, such as ./data:/data (read-only unless :rw; repeatable)")
	f.StringArrayVar(&r.envs, "env", nil, "K=V: set an environment variable (repeatable; nothing else is passed)")
	f.StringVar(&r.network, "network", "none", "none, or allow:HOST[,HOST] for HTTP(S) through the egress proxy")
	f.StringArrayVar(&r.creds, "credential", nil, "[http://]HOST=VAR: the egress proxy adds \"Authorization: $VAR\" to requests for HOST (a --network host); the command never holds it (repeatable)")
	f.StringVar(&r.timeout, "timeout", "", "wall-clock limit, such as 10s or 2m (default 30s; at most 24h)")
	f.StringVar(&r.memory, "memory", "", "memory limit, such as 256MiB or 1GiB (default 512MiB)")
	f.StringVar(&r.pids, "pids", "", "process limit (default 128)")
	f.StringVar(&r.cpus, "cpus", "", "CPU quota in cores, such as 0.5 (default: none)")
	f.StringVar(&r.disk, "disk", "", "bytes /tmp and any one file may hold, such as 64MiB (default 256MiB)")
	f.StringVar(&r.output, "output-limit", "", "stdout and stderr bytes kept, each, such as 64KiB (default 1MiB)")
	f.StringVar(&r.outputsDir, "outputs-dir", "", "write the files the command left in ./outputs into this host directory (made if missing; files of the same name are replaced)")
	f.StringVar(&r.profile, "profile", "", "YAML file whose box section sets these flags (and whose http and mcp_servers sections give tools); flags override it")
	f.BoolVar(&r.asJSON, "json", false, "print the result as one JSON object")
	r.http.add(f)
	r.mcp.add(f)
	r.backend.add(f)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%v (glovebox run's flags go before the command; put the command after --: glovebox run [flags] -- ARGV...)", err)}
	})
	return cmd
}

// run builds the Command from the profile and the flags, runs it and
// reports.
func (r *runFlags) run(f *pflag.FlagSet, args []string) error {
	var bp boxProfile
	var profileHTTP httpFlags
	at := func(flag, key string) string {
		if f.Changed(flag) || r.profile == "" {
			return "--" + flag
		}
		return fmt.Sprintf("--profile %s: %s", r.profile, key)
	}
	if r.profile != "" {
		var err error
		if _, profileHTTP, err = loadProfile(r.profile); err != nil {
			return usageError{err}
		}
		b, err := os.ReadFile(r.profile)
		if err != nil {
			return usageError{fmt.Errorf("--profile: %w", err)}
		}
		var pf struct {
			Box boxProfile `yaml:"box"`
		}
		if err := yaml.Unmarshal(b, &pf); err != nil {
			return usageError{fmt.Errorf("--profile %s: box: %v", r.profile, err)}
		}
		bp = pf.Box
	}
	pick := func(flag, flagVal, profileVal string) string {
		if f.Changed(flag) || profileVal == "" {
			return flagVal
		}
		return profileVal
	}
	h := r.http.over(profileHTTP)
	base, err := h.config()
	if err != nil {
		return err
	}
	b, err := newBox(pick("box", r.boxName, bp.Backend), base, r.backend.over(f, bp))
	if err != nil {
		if errors.Is(err, box.ErrUnavailable) {
			return usageError{err}
		}
		return err
	}

	c := box.Command{Argv: args, Env: map[string]string{}, Files: map[string][]byte{}}
	addFile := func(what, name, path string) error {
		if err := box.ValidFileName(name); err != nil {
			return usageError{fmt.Errorf("%s %q: NAME must be a relative path without . or .. parts", what, name)}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return usageError{fmt.Errorf("%s %s=%s: %w", what, name, path, errors.Unwrap(err))}
		}
		c.Files[name] = data
		return nil
	}
	for _, name := range sortedKeys(bp.Files) {
		p := bp.Files[name]
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(r.profile), p)
		}
		if err := addFile(fmt.Sprintf("--profile %s: box.files", r.profile), name, p); err != nil {
			return err
		}
	}
	for _, spec := range r.files {
		name, path, ok := strings.Cut(spec, "=")
		if !ok || name == "" || path == "" {
			return usageError{fmt.Errorf("--file %q: want NAME=PATH, such as data.csv=./data.csv", spec)}
		}
		if err := addFile("--file", name, path); err != nil {
			return err
		}
	}
	addMount := func(what string, m box.Mount) error {
		if err := checkHostDir(m.HostPath); err != nil {
			return usageError{fmt.Errorf("%s: %w", what, err)}
		}
		if err := (&box.Command{Argv: []string{"true"}, Mounts: []box.Mount{m}}).Validate(); err != nil {
			return usageError{fmt.Errorf("%s: %s", what, strings.TrimPrefix(err.Error(), box.ErrInvalidCommand.Error()+": "))}
		}
		// A flag replaces the profile's mount at the same guest path.
		for i, o := range c.Mounts {
			if o.GuestPath == m.GuestPath {
				c.Mounts = append(c.Mounts[:i], c.Mounts[i+1:]...)
				break
			}
		}
		c.Mounts = append(c.Mounts, m)
		return nil
	}
	for i, pm := range bp.Mounts {
		what := fmt.Sprintf("--profile %s: box.mounts[%d]", r.profile, i)
		if pm.Host == "" || pm.Guest == "" {
			return usageError{fmt.Errorf("%s needs host and guest", what)}
		}
		host := pm.Host
		if !filepath.IsAbs(host) {
			host = filepath.Join(filepath.Dir(r.profile), host)
		}
		if abs, err := filepath.Abs(host); err == nil {
			host = abs
		}
		if err := addMount(what, box.Mount{HostPath: host, GuestPath: pm.Guest, Writable: pm.Writable}); err != nil {
			return err
		}
	}
	for _, spec := range r.mounts {
		m, err := parseMount(spec)
		if err != nil {
			return usageError{err}
		}
		if err := addMount(fmt.Sprintf("--mount %q", spec), box.Mount{HostPath: m.HostPath, GuestPath: m.GuestPath, Writable: m.Writable}); err != nil {
			return err
		}
	}
	for k, v := range bp.Env {
		c.Env[k] = v
	}
	for _, e := range r.envs {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return usageError{fmt.Errorf("--env %q: want K=V", e)}
		}
		c.Env[k] = v
	}

	switch {
	case f.Changed("network") || len(bp.Network) == 0:
		switch {
		case r.network == "none" || r.network == "":
		case strings.HasPrefix(r.network, "allow:"):
			c.Network.Allow = strings.Split(strings.TrimPrefix(r.network, "allow:"), ",")
		default:
			return usageError{fmt.Errorf("--network %q: want none or allow:HOST[,HOST]", r.network)}
		}
	default:
		c.Network.Allow = bp.Network
	}
	for _, host := range c.Network.Allow {
		what := at("network", "box.network")
		switch {
		case host == "":
			return usageError{fmt.Errorf("%s: an empty host name", what)}
		case strings.Contains(host, "://") || strings.Contains(host, "/"):
			return usageError{fmt.Errorf("%s %q: give a host name, not a URL", what, host)}
		case strings.Contains(host, ":"):
			if _, err := netip.ParseAddr(host); err != nil {
				return usageError{fmt.Errorf("%s %q: give a host name without a port (ports other than 80 and 443: --http-port)", what, host)}
			}
			return usageError{fmt.Errorf("%s %q: IPv6 literals cannot be allowed here; name the host", what, host)}
		}
		if _, err := netip.ParseAddr(host); err == nil && !base.AllowIPLiterals {
			return usageError{fmt.Errorf("%s %q is an IP address: add --http-allow-ip-literals (and --http-trust for a private or loopback address), or name the host", what, host)}
		}
	}
	type credSpec struct {
		host, env, header string
		tls               bool
		what              string
	}
	var creds []credSpec
	for i, pc := range bp.Credentials {
		tls := pc.TLS == nil || *pc.TLS
		creds = append(creds, credSpec{pc.Host, pc.Env, pc.Header, tls, fmt.Sprintf("--profile %s: box.credentials[%d]", r.profile, i)})
	}
	for _, spec := range r.creds {
		hostPart, env, ok := strings.Cut(spec, "=")
		tls := true
		if rest, plain := strings.CutPrefix(hostPart, "http://"); plain {
			hostPart, tls = rest, false
		} else {
			hostPart = strings.TrimPrefix(hostPart, "https://")
		}
		if !ok || hostPart == "" || env == "" {
			return usageError{fmt.Errorf("--credential %q: want [http://]HOST=VAR, VAR naming glovebox's environment variable that holds the header value", spec)}
		}
		creds = append(creds, credSpec{hostPart, env, "", tls, "--credential " + spec})
	}
	for _, cs := range creds {
		if cs.host == "" || cs.env == "" {
			return usageError{fmt.Errorf("%s: needs host and env", cs.what)}
		}
		allowed := false
		for _, h := range c.Network.Allow {
			allowed = allowed || strings.EqualFold(h, cs.host)
		}
		if !allowed {
			return usageError{fmt.Errorf("%s: %s is not a --network allow: host", cs.what, cs.host)}
		}
		if _, ok := os.LookupEnv(cs.env); !ok {
			return usageError{fmt.Errorf("%s: the environment variable %s is not set", cs.what, cs.env)}
		}
		env := cs.env
		c.Network.Credentials = append(c.Network.Credentials, box.HostCredential{
			Host: cs.host, Header: cs.header, TLS: cs.tls,
			Value: func(context.Context) (string, error) { return os.Getenv(env), nil },
		})
	}

	if v := pick("timeout", r.timeout, bp.Timeout); v != "" {
		what := at("timeout", "box.timeout")
		d, err := parseDuration(what, v)
		if err != nil {
			return usageError{err}
		}
		if d == 0 {
			return usageError{fmt.Errorf("%s %q: the limit must be more than zero (leave it out for the 30s default)", what, v)}
		}
		c.Timeout = d
	}
	sizes := []struct {
		flag, key, val string
		min, max       uint64
		dst            func(uint64)
	}{
		{"memory", "box.memory", pick("memory", r.memory, bp.Memory), 1 << 20, 1 << 40, func(n uint64) { c.Limits.Memory = int64(n) }},
		{"disk", "box.disk", pick("disk", r.disk, bp.Disk), 4096, 1 << 40, func(n uint64) { c.Limits.Disk = int64(n) }},
		{"output-limit", "box.output", pick("output-limit", r.output, bp.Output), 1, 1 << 30, func(n uint64) { c.Limits.Output = int(n) }},
	}
	for _, s := range sizes {
		if s.val == "" {
			continue
		}
		what := at(s.flag, s.key)
		n, err := parseSize(what, s.val, s.max)
		if err != nil {
			return usageError{err}
		}
		if n < s.min {
			return usageError{fmt.Errorf("%s %q is %d bytes, under the minimum of %s: write a unit, such as 256MiB", what, s.val, n, humanize.IBytes(s.min))}
		}
		s.dst(n)
	}
	if v := pick("pids", r.pids, bp.Pids); v != "" {
		what := at("pids", "box.pids")
		n, err := parseCount(what, v, 1<<22)
		if err != nil {
			return usageError{err}
		}
		if n == 0 {
			return usageError{fmt.Errorf("%s %q: at least 1 (leave it out for the default of %d)", what, v, box.DefaultPids)}
		}
		c.Limits.Pids = int(n)
	}
	if v := pick("cpus", r.cpus, bp.CPUs); v != "" {
		what := at("cpus", "box.cpus")
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || n <= 0 || n > 1024 {
			return usageError{fmt.Errorf("%s %q is not a number of cores such as 0.5 or 2", what, v)}
		}
		c.Limits.CPUs = n
	}
	if err := c.Validate(); err != nil {
		return usageError{err}
	}
	if b.Posture().Backend == "gvisor" {
		for _, m := range c.Mounts {
			if msg := gvisorUnwritable(m); msg != "" {
				fmt.Fprintf(os.Stderr, "glovebox: warning: %s\n", msg)
			}
		}
	}

	// SIGTERM (kill, timeout(1), a service manager) and SIGHUP (a closed
	// terminal) cancel the run as Ctrl-C does, so the box still removes
	// its working directory and cgroup.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// Tools: the HTTP tool and MCP servers' tools, as for eval.
	var ts *glovebox.Toolset
	if len(h.allow) > 0 || h.anyHost {
		if ts, err = h.tools(); err != nil {
			return err
		}
	}
	if ts, err = r.mcp.bind(ts, r.profile); err != nil {
		return err
	}
	if ts != nil {
		timeout := c.Timeout
		if timeout == 0 {
			timeout = box.DefaultTimeout
		}
		rt, err := newRuntime(ctx, glovebox.Config{Tools: ts, Limits: glovebox.Limits{Timeout: timeout}})
		if err != nil {
			return err
		}
		defer rt.Close()
		c.Tools = rt.ToolSession(timeout)
		// Without it only "glovebox tool" from a shell is missing: say so
		// and run.
		if cleanup, err := shareSelf(&c); err != nil {
			fmt.Fprintf(os.Stderr, "glovebox: warning: the command cannot call \"glovebox tool\" (Python's and Ruby's clients work): %v\n", err)
		} else {
			defer cleanup()
		}
	}
	if !r.asJSON {
		c.Stream = func(stream int, p []byte) {
			if stream == 1 {
				os.Stdout.Write(p)
			} else {
				os.Stderr.Write(p)
			}
		}
	}
	res, err := b.Run(ctx, c)
	if err != nil {
		if errors.Is(err, box.ErrInvalidCommand) || errors.Is(err, box.ErrUnsupported) || errors.Is(err, box.ErrUnavailable) {
			return usageError{err}
		}
		return err
	}
	var saved error
	if r.outputsDir != "" {
		saved = writeOutputs(r.outputsDir, res.Outputs)
	}
	if r.asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		reportRun(res, c.Limits.WithDefaults(), r.outputsDir, saved)
	}
	if saved != nil {
		return saved
	}
	if res.ExitStatus != 0 {
		return exitError{res.ExitStatus}
	}
	return nil
}

// reportRun says on stderr, in human mode, what the exit status alone does
// not: a timeout, a memory kill, a cancel, and the files left in outputs.
func reportRun(res *box.Result, l box.Limits, dir string, saved error) {
	switch {
	case res.TimedOut:
		fmt.Fprintf(os.Stderr, "glovebox: the command timed out (exit 124)\n")
	case res.KilledForMemory:
		fmt.Fprintf(os.Stderr, "glovebox: the command was killed for going over its memory limit of %s (exit 137; raise it with --memory)\n", humanize.IBytes(uint64(l.Memory)))
	case res.Canceled:
		fmt.Fprintf(os.Stderr, "glovebox: the run was interrupted (exit 137)\n")
	case res.KilledExternally:
		fmt.Fprintf(os.Stderr, "glovebox: the sandbox was killed from outside glovebox (exit %d): by an operator, the host's OOM killer or another program\n", res.ExitStatus)
	}
	if res.StdoutTruncated || res.StderrTruncated {
		fmt.Fprintf(os.Stderr, "glovebox: output past %s per stream was dropped (raise it with --output-limit)\n", humanize.IBytes(uint64(l.Output)))
	}
	if len(res.Outputs) == 0 && !res.OutputsTruncated {
		return
	}
	var parts []string
	for _, name := range sortedKeys(res.Outputs) {
		parts = append(parts, fmt.Sprintf("%s (%s)", name, humanize.IBytes(uint64(len(res.Outputs[name])))))
	}
	list := strings.Join(parts, ", ")
	switch {
	case dir != "" && saved == nil:
		fmt.Fprintf(os.Stderr, "glovebox: outputs written to %s: %s\n", dir, list)
	case dir == "":
		fmt.Fprintf(os.Stderr, "glovebox: the command left %d file(s) in outputs/, not kept (keep them with --outputs-dir DIR): %s\n", len(res.Outputs), list)
	}
	if res.OutputsTruncated {
		fmt.Fprintf(os.Stderr, "glovebox: more files were left in outputs/ than the %s read back\n", humanize.IBytes(uint64(l.OutputFiles)))
	}
}

// writeOutputs writes the outputs (relative slash paths, checked by the
// box) under dir. It resolves every name inside dir (os.Root): a symlink
// already there (one the command planted through a writable mount of dir,
// say) that leads out of dir is an error, never followed.
func writeOutputs(dir string, outs map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--outputs-dir: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("--outputs-dir: %w", err)
	}
	defer root.Close()
	for _, name := range sortedKeys(outs) {
		if box.ValidFileName(name) != nil {
			continue
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("--outputs-dir: %w", err)
			}
		}
		if err := root.WriteFile(name, outs[name], 0o644); err != nil {
			return fmt.Errorf("--outputs-dir: %w", err)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// guestBin is where glovebox run puts its own executable inside the box,
// so a shell there can call "glovebox tool NAME".
const guestBin = "/opt/glovebox/bin"

// shareSelf binds this executable into the box at guestBin/glovebox, read
// only, and puts guestBin on the command's PATH (unless --env set PATH):
// a box's shell reaches the tools with "glovebox tool". The executable is
// hard-linked (copied across file systems) into a directory of its own,
// so no neighbouring host file is exposed; cleanup removes it.
func shareSelf(c *box.Command) (cleanup func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding glovebox's own executable for the box: %w", err)
	}
	dir, err := os.MkdirTemp("", "glovebox-bin-")
	if err != nil {
		return nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	dst := filepath.Join(dir, "glovebox")
	if err := os.Link(exe, dst); err != nil {
		if err := copyFile(exe, dst); err != nil {
			cleanup()
			return nil, fmt.Errorf("putting glovebox into the box: %w", err)
		}
	}
	os.Chmod(dir, 0o755)
	c.Mounts = append([]box.Mount{{HostPath: dir, GuestPath: guestBin}}, c.Mounts...)
	if c.Env == nil {
		c.Env = map[string]string{}
	}
	if _, ok := c.Env["PATH"]; !ok {
		c.Env["PATH"] = "/usr/local/bin:/usr/bin:/bin:" + guestBin
	}
	return cleanup, nil
}

// copyFile copies the executable src to dst (mode 0755).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// gvisorUID is the uid and gid gVisor runs the command as (gvisor.Config's
// default), and checks file permissions against.
const gvisorUID = 65534

// gvisorUnwritable says why a writable mount's host directory is one the
// command cannot write under gVisor (its mode bits give uid 65534 no
// write permission), or "" when it can or the mount is read-only.
func gvisorUnwritable(m box.Mount) string {
	if !m.Writable {
		return ""
	}
	fi, err := os.Stat(m.HostPath)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == gvisorUID && perm&0o200 != 0, st.Gid == gvisorUID && perm&0o020 != 0, perm&0o002 != 0:
		return ""
	}
	return fmt.Sprintf("writable mount %s: gVisor runs the command as uid %d, which may not write %s (owner uid %d, mode %#o); writes will fail with Permission denied unless you chown %d or chmod o+w it",
		m.GuestPath, gvisorUID, m.HostPath, st.Uid, perm, gvisorUID)
}
