package box

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"reflect"
	"strings"
	"time"
)

// Box runs one [Command] and returns its [Result]. Implementations are safe
// for concurrent use: each Run gets its own sandbox.
//
// Run returns an error only when the command could not be run at all (the
// backend is missing or refused the Command, or the sandbox could not be
// made); everything the command itself did, a timeout included, is in the
// Result. Errors wrap [ErrInvalidCommand], [ErrUnavailable], [ErrBackend],
// [ErrDisabled], [ErrUnsupported] or [ErrNotOffHost] where one applies.
type Box interface {
	// Run runs c. When ctx ends the command is killed and the Result has
	// Canceled set (exit status 137).
	Run(ctx context.Context, c Command) (*Result, error)
	// Posture says where the box runs commands.
	Posture() Posture
}

// Posture is where a box runs code: its isolation strength and its trust
// domain, two separate axes. Its zero value (IsolationNone, TrustNone)
// describes a box that runs nothing.
type Posture struct {
	Backend   string    `json:"backend"`   // "bwrap", "gvisor", "null", …
	Isolation Isolation `json:"isolation"` // how the code is kept in
	Trust     Trust     `json:"trust"`     // whose machine it runs on
}

// OffHost reports whether code runs outside the host's security context
// (Trust is TrustVendor or TrustRemote): an escape from the sandbox does
// not land next to the host's secrets.
func (p Posture) OffHost() bool { return p.Trust.OffHost() }

// Isolation is the strength of the wall around the code, weakest first.
type Isolation string

// The isolation levels.
const (
	IsolationNone       Isolation = "none"       // no sandbox (the null box, a plain process)
	IsolationNamespaces Isolation = "namespaces" // Linux namespaces + seccomp + limits (bubblewrap, containers)
	IsolationWasm       Isolation = "wasm"       // a WebAssembly VM (glovebox's Eval)
	IsolationGVisor     Isolation = "gvisor"     // a user-space kernel (runsc)
	IsolationMicroVM    Isolation = "microvm"    // a guest kernel under KVM (Firecracker)
	IsolationVendorVM   Isolation = "vendor_vm"  // a hosted vendor's VM (E2B)
)

// Trust is the security context code runs in: what an escape reaches.
type Trust string

// The trust domains.
const (
	TrustVendor Trust = "vendor" // a hosted vendor's cloud: off-host by construction
	TrustRemote Trust = "remote" // a dedicated sandbox host (the executor): off-host
	TrustVM     Trust = "vm"     // a microVM on this host: own kernel, same machine
	TrustHost   Trust = "host"   // this host, next to its secrets
	TrustNone   Trust = "none"   // nothing runs (the null box)
)

// OffHost reports whether t is TrustVendor or TrustRemote.
func (t Trust) OffHost() bool { return t == TrustVendor || t == TrustRemote }

// WasmPosture is glovebox's in-process Eval on the same axes: Ruby in a
// WebAssembly VM, inside the host process.
var WasmPosture = Posture{Backend: "wasm", Isolation: IsolationWasm, Trust: TrustHost}

// RequireOffHost returns nil when b runs code off this host, and an error
// wrapping [ErrNotOffHost] naming its trust domain otherwise. Call it
// before handing b code nobody vouches for:
//
//	if err := box.RequireOffHost(b); err != nil { return err }
func RequireOffHost(b Box) error {
	p := b.Posture()
	if p.OffHost() {
		return nil
	}
	return fmt.Errorf("%w: the %s box runs code with trust %q", ErrNotOffHost, p.Backend, p.Trust)
}

// Errors. Each error a Box returns wraps one of these where it applies.
var (
	// ErrInvalidCommand: the Command breaks a rule (empty argv, a bad
	// file name, a negative limit, an env name with "=").
	ErrInvalidCommand = errors.New("box: invalid command")
	// ErrUnavailable: the backend's program or service is not there.
	ErrUnavailable = errors.New("box: backend unavailable")
	// ErrDisabled: the null box, which runs nothing.
	ErrDisabled = errors.New("box: sandbox disabled")
	// ErrNotOffHost: RequireOffHost refused a box on this host.
	ErrNotOffHost = errors.New("box: untrusted code requires an off-host sandbox")
	// ErrBackend: the backend's sandbox program is there but failed to
	// start the sandbox (gVisor's runsc without the root or cgroup it
	// needs, say); the message gives the program's reason and what to
	// do. The command did not run.
	ErrBackend = errors.New("box: the sandbox failed to start")
	// ErrUnsupported: the backend cannot honour a part of the Command
	// (an allowlist on a backend without the proxy, say).
	ErrUnsupported = errors.New("box: not supported by this backend")
)

// Command is one run. Its zero value is invalid: set Argv or Shell.
type Command struct {
	// Argv is executed directly, without a shell; Argv[0] is looked up
	// in the sandbox's PATH (/usr/local/bin:/usr/bin:/bin).
	Argv []string
	// Shell, when Argv is empty, runs as /bin/sh -c Shell.
	Shell string
	// Files are written into the fresh working directory before the
	// run: name (a relative slash path, no "..") to content. Directories
	// are made as needed.
	Files map[string][]byte
	// Mounts are host directories bound into the sandbox (read-only
	// unless Writable). See [Mount] for the guest paths allowed.
	Mounts []Mount
	// Stdin is the command's standard input; nil means empty.
	Stdin []byte
	// Env is the command's whole environment besides PATH, HOME, TMPDIR
	// and (with tools) GLOVEBOX_TOOLS: nothing of the host's leaks in.
	Env map[string]string
	// Credentials are secrets resolved when the command starts, one
	// function per variable name, and put only in the command's
	// environment: never in the Result, an error or a log line. A
	// function's error fails the run with the variable's name only; a
	// nil function is refused (ErrInvalidCommand).
	Credentials map[string]func(context.Context) (string, error)
	// Network is the command's network; the zero value is NetworkNone.
	Network Network
	// Timeout is the wall-clock limit, enforced by the host; zero means
	// DefaultTimeout. At it the whole process tree is killed and the
	// Result has TimedOut and ExitStatus 124 (timeout(1)'s code).
	Timeout time.Duration
	// Limits bound the resources; zero fields take the defaults.
	Limits Limits
	// Tools, when set, are reachable from inside the box through a unix
	// socket (see the tool wire format in doc.go), with client libraries
	// for Python and Ruby in GLOVEBOX_TOOLS. nil, or an interface
	// holding a nil pointer (rt.ToolSession(0) on a Runtime without
	// tools), means no tools.
	Tools Tools
	// Stream, when set, gets stdout and stderr as the command writes
	// them (stream 1 or 2), from one goroutine at a time, in chunks, up
	// to the output limit. It must not keep p.
	Stream func(stream int, p []byte)
}

// Mount is a host directory bound into the sandbox.
type Mount struct {
	// HostPath is an absolute path to an existing directory; a backend
	// refuses the run (ErrInvalidCommand) when it is not one.
	HostPath string `json:"host_path"`
	// GuestPath is where the command sees it: absolute and clean, not
	// "/" and not on or under the paths the box provides (/bin, /dev,
	// /etc, /lib*, /proc, /run, /sbin, /sys, /tmp, /usr, /work), such as
	// /data or /mnt/in.
	GuestPath string `json:"guest_path"`
	// Writable lets the command write there; the default is read-only.
	// What it may make is the package's file policy: no setuid or
	// setgid bits, file capabilities or device nodes (see the package
	// doc).
	Writable bool `json:"writable,omitempty"`
}

// reservedGuest are the guest paths a Mount may not be on or under.
var reservedGuest = []string{"/bin", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/tmp", "/usr", "/work"}

// Network is a run's network access.
type Network struct {
	// Allow lists the host names the command may reach over HTTP(S),
	// through an egress proxy applying httptool's rules; empty means no
	// network at all (an empty network namespace: no route, no DNS).
	Allow []string
	// Credentials is the credentials proxy mode: headers the egress
	// proxy adds to the command's requests for one allowed host, so the
	// command never holds the secret (not in its environment, files or
	// memory). Each Host must be in Allow. See [HostCredential].
	Credentials []HostCredential
	// Inspect, when set, is asked by the egress proxy about each request
	// before it leaves (see [EgressRequest] for what it sees: a plain
	// http:// request whole, a CONNECT tunnel by its host and port
	// only); an error refuses the request with 403 and the error's
	// message. It runs on the proxy's goroutines, one call per request,
	// possibly several at once. glovebox's data-flow policy provides one
	// (egress.Labels). Only boxes that run the proxy in this process
	// call it: a remote executor's box refuses a Command that sets it
	// (ErrUnsupported), so nothing goes out uninspected.
	Inspect func(EgressRequest) error `json:"-"`
}

// EgressRequest is what Network.Inspect is shown of one request through
// the egress proxy.
type EgressRequest struct {
	// Host is the host name (or address) the command asked for, Port its
	// port as written ("" when the URL gives none).
	Host, Port string
	// Tunnel is set for CONNECT, which is how HTTPS (and any other TLS)
	// goes through the proxy: the command encrypts what it sends inside
	// the tunnel, so the proxy sees only Host and Port, and Method, URL,
	// Header and Body are empty.
	Tunnel bool
	// Method, URL, Header and Body are a plain http:// request's as the
	// command sent it, before the proxy adds a credential. The body is
	// read whole before the request goes on; one over MaxInspectedBody
	// bytes is refused with 413, uninspected.
	Method, URL string
	Header      http.Header
	Body        []byte
}

// MaxInspectedBody is the largest request body the egress proxy reads
// for Network.Inspect (1 MiB, the size of the head it accepts): the
// proxy holds it in memory while Inspect decides.
const MaxInspectedBody = 1 << 20

// HostCredential is a secret the egress proxy adds as a header to every
// request for Host that goes through it. The command asks for
// http://Host/… (plain HTTP to the proxy, inside the sandbox); with TLS
// set the proxy speaks HTTPS to Host (port 443 unless the URL names one),
// so the secret crosses the network encrypted. CONNECT to Host is refused
// with 403, since a header cannot be added inside the guest's own TLS. The
// value is resolved when the run starts and, like Command.Credentials,
// never written to a Result, an error or a log line. Requests for other
// hosts (a redirect elsewhere included) never get it; a server that
// echoes request headers back does hand it to the command.
type HostCredential struct {
	Host   string // an entry of Network.Allow, exactly (no patterns)
	Header string // the header; empty means "Authorization"
	// Value returns the header's value, such as "Bearer " + token. Its
	// error fails the run with the host's name only.
	Value func(context.Context) (string, error) `json:"-"`
	TLS   bool                                  // the proxy speaks HTTPS to Host
}

// Limits bound one run. Zero fields take the default named beside them.
type Limits struct {
	Memory int64 // bytes of memory (cgroup, else RLIMIT_AS); DefaultMemory
	// CPUs is the CPU quota in cores (cgroup cpu.max); zero: no quota.
	CPUs   float64
	Pids   int   // processes and threads; DefaultPids
	Output int   // bytes kept of stdout and of stderr each; DefaultOutput
	Disk   int64 // bytes the working directory and /tmp may hold; DefaultDisk
	// OutputFiles is how many bytes of files in the outputs directory
	// are read back in all; DefaultOutputFiles.
	OutputFiles int64
}

// Defaults for zero fields. Our choices, sized for a script a model
// wrote: a CPython start takes ~10 MiB and ~1 thread, a Ruby one ~20 MiB.
const (
	DefaultTimeout     = 30 * time.Second
	DefaultMemory      = 512 << 20
	DefaultPids        = 128
	DefaultOutput      = 1 << 20
	DefaultDisk        = 256 << 20
	DefaultOutputFiles = 4 << 20
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	l.Memory = cmp.Or(l.Memory, DefaultMemory)
	l.Pids = cmp.Or(l.Pids, DefaultPids)
	l.Output = cmp.Or(l.Output, DefaultOutput)
	l.Disk = cmp.Or(l.Disk, DefaultDisk)
	l.OutputFiles = cmp.Or(l.OutputFiles, DefaultOutputFiles)
	return l
}

// Validate checks c and returns an error wrapping ErrInvalidCommand. It
// also sets a Tools that holds a nil pointer (what
// glovebox.Runtime.ToolSession returns for a Runtime without tools) to
// nil: a run with it has no tools, as with a nil Tools. Every backend
// calls it first.
func (c *Command) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrInvalidCommand, fmt.Sprintf(f, a...)) }
	if isNil(c.Tools) {
		c.Tools = nil
	}
	if len(c.Argv) == 0 && c.Shell == "" {
		return bad("no Argv and no Shell")
	}
	if len(c.Argv) > 0 && c.Argv[0] == "" {
		return bad("Argv[0] is empty")
	}
	for _, a := range c.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("an argument holds a NUL byte")
		}
	}
	if strings.IndexByte(c.Shell, 0) >= 0 {
		return bad("Shell holds a NUL byte")
	}
	for name := range c.Files {
		if err := ValidFileName(name); err != nil {
			return err
		}
	}
	for _, m := range c.Mounts {
		if !path.IsAbs(m.HostPath) || strings.IndexByte(m.HostPath, 0) >= 0 {
			return bad("mount host path %q is not absolute", m.HostPath)
		}
		g := m.GuestPath
		if !path.IsAbs(g) || path.Clean(g) != g || g == "/" || strings.IndexByte(g, 0) >= 0 {
			return bad("mount guest path %q: want an absolute, clean path such as /data", g)
		}
		for _, r := range reservedGuest {
			if g == r || strings.HasPrefix(g, r+"/") {
				return bad("mount guest path %q is on the box's own %s", g, r)
			}
		}
	}
	for k, v := range c.Env {
		if err := validEnv(k); err != nil {
			return err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return bad("env %s holds a NUL byte", k)
		}
	}
	for k, f := range c.Credentials {
		if err := validEnv(k); err != nil {
			return err
		}
		if f == nil {
			return bad("credential %s has no function", k)
		}
	}
	l := c.Limits
	if c.Timeout < 0 || l.Memory < 0 || l.CPUs < 0 || l.Pids < 0 || l.Output < 0 || l.Disk < 0 || l.OutputFiles < 0 {
		return bad("a negative timeout or limit")
	}
	for _, h := range c.Network.Allow {
		if h == "" || strings.ContainsAny(h, "/ :@") {
			return bad("allowlist entry %q is not a host name", h)
		}
	}
	for _, hc := range c.Network.Credentials {
		found := false
		for _, h := range c.Network.Allow {
			found = found || strings.EqualFold(h, hc.Host)
		}
		switch {
		case !found:
			return bad("a credential for %q, which is not in Network.Allow", hc.Host)
		case hc.Value == nil:
			return bad("the credential for %q has no Value", hc.Host)
		case strings.ContainsAny(hc.Header, " :\r\n\x00"):
			return bad("credential header name %q", hc.Header)
		}
	}
	return nil
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, slice, channel or function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func validEnv(k string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("%w: environment name %q", ErrInvalidCommand, k)
	}
	return nil
}

// ValidFileName checks a Files name: a relative slash path of at most 255
// bytes, no "." or ".." element, no NUL. The error wraps ErrInvalidCommand.
func ValidFileName(name string) error {
	if name == "" || len(name) > 255 || strings.IndexByte(name, 0) >= 0 || path.IsAbs(name) || path.Clean(name) != name {
		return fmt.Errorf("%w: file name %q", ErrInvalidCommand, name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." || el == "." {
			return fmt.Errorf("%w: file name %q", ErrInvalidCommand, name)
		}
	}
	return nil
}

// ArgvOrShell returns the argv that runs c: c.Argv, or /bin/sh -c c.Shell.
func (c *Command) ArgvOrShell() []string {
	if len(c.Argv) > 0 {
		return c.Argv
	}
	return []string{"/bin/sh", "-c", c.Shell}
}

// Result is what a run did.
type Result struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"` // more than Limits.Output bytes were written
	StderrTruncated bool   `json:"stderr_truncated"`
	// ExitStatus is the command's exit code; 128+N when signal N ended
	// it; 124 on timeout; 137 when killed for memory or cancelled; 128+N
	// (137 for SIGKILL) when KilledExternally. As in
	// the shell, 127 means Argv[0] was not found and 126 that it was
	// found but could not be executed (not executable, a directory);
	// the OS backends then put one line naming it on Stderr,
	// "glovebox: NAME: command not found" or "glovebox: NAME: cannot
	// execute: REASON".
	ExitStatus      int  `json:"exit_status"`
	TimedOut        bool `json:"timed_out"`
	KilledForMemory bool `json:"killed_for_memory"` // an OOM killer ended a process of the run (its memory limit's, or the host's)
	Canceled        bool `json:"canceled"`          // the caller's context ended the run
	// KilledExternally says something outside the run and outside this
	// Box ended the sandbox itself with a signal (an operator's kill -9,
	// the host's OOM killer picking the sandbox's process, another
	// program killing the run's cgroup): bwrap's host process, or the
	// runsc run process or its sandbox (sentry) process, died of a signal
	// the Box did not send. ExitStatus is then 128+N. It is not set with
	// TimedOut, Canceled or KilledForMemory, which name their own kill. A
	// signal that reaches only the command's own processes inside the
	// sandbox (the command killing itself, say) is the command's: 128+N
	// with no flag, as in a shell. Under gVisor, a kill that reaches
	// runsc's file server (gofer) before the sandbox process makes gVisor
	// end the command itself, which cannot be told from the command's own
	// 137: the flag is then not set; and a kill of one of the sentry's
	// own stub processes (ptrace platform) leaves the sandbox waiting,
	// so the run ends at its timeout (TimedOut, 124).
	KilledExternally bool `json:"killed_externally"`
	// Duration is start to result, sandbox set-up included.
	Duration time.Duration `json:"-"`
	Posture
	// Outputs are the files the command left in ./outputs (read back up
	// to Limits.OutputFiles bytes and, for bwrap and gVisor, 1000 files in
	// all; OutputsTruncated says some were left out), by relative slash
	// path.
	Outputs          map[string][]byte `json:"outputs,omitempty"`
	OutputsTruncated bool              `json:"outputs_truncated,omitempty"`
	// ToolCalls is the transcript of tool calls made from inside, as the
	// Tools gave it (for glovebox's Runtime: its ToolCall JSON array).
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	// Enforced lists the limits the backend enforced on this run
	// ("memory:cgroup", "pids:cgroup", "memory:rlimit", …): what a host
	// without cgroups gives is visible here.
	Enforced []string `json:"enforced,omitempty"`
}

// OK reports whether the command exited 0.
func (r *Result) OK() bool { return r.ExitStatus == 0 && !r.TimedOut }

// MarshalJSON adds duration_ms and off_host to the fields.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result
	outs := map[string]string{}
	for k, v := range r.Outputs {
		outs[k] = string(v)
	}
	return json.Marshal(struct {
		*plain
		DurationMS float64           `json:"duration_ms"`
		OffHost    bool              `json:"off_host"`
		Outputs    map[string]string `json:"outputs,omitempty"`
	}{(*plain)(r), float64(r.Duration.Microseconds()) / 1000, r.OffHost(), outs})
}

// Tools is the host side of the tool socket: glovebox's Runtime gives one
// per run (glovebox.Runtime.ToolSession). Call gets one request's tool name
// and argument bytes (the wire form of [args, kwargs], or empty) and
// returns the reply frame (see doc.go); it must be safe for concurrent use.
type Tools interface {
	Names() []string
	Call(ctx context.Context, name string, args []byte) []byte
	Transcript() json.RawMessage
}

// EgressFunc is how an OS box gets a run's network allowlist: called once
// per run with the Command's Network.Allow hosts, it returns the dialer the
// box's egress proxy uses for every request (refusing what the policy
// refuses) and a release the box calls when the run ends. egress.HTTPTool
// makes one that applies httptool's rules. A nil EgressFunc in a box's
// Config means a Command with an allowlist is refused with ErrUnsupported.
type EgressFunc func(hosts []string) (dial func(ctx context.Context, rawURL string) (net.Conn, error), release func(), err error)
