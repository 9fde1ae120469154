// Package box runs any command in an OS-level sandbox behind one call,
// [Box.Run], and returns a [Result] in the same vocabulary as glovebox's
// Eval: output (capped, with truncation flags), exit status, timed-out and
// killed-for-memory flags, duration, the tool-call transcript, and where
// it ran.
//
// # Two axes
//
// Every box and every result carries a [Posture]: its [Isolation] (how
// strong the wall is: namespaces < gVisor < microVM) and its [Trust] domain
// (whose machine an escape lands on). They are separate questions: a
// gVisor sandbox on the application host is strong isolation in the host's
// trust domain. [Posture.OffHost] is true only for TrustVendor and
// TrustRemote, and [RequireOffHost] is the one-call guard that refuses
// code nobody vouches for on a box that is not off-host. The in-process
// wasm engine is [WasmPosture].
//
// # Backends
//
//   - [Null]: disabled; every run fails with [ErrDisabled].
//   - box/bwrap: bubblewrap (namespaces, seccomp, cgroup or rlimit limits).
//   - box/gvisor: gVisor's runsc with a generated OCI bundle (the
//     sentry's RLIMIT_NPROC, a cgroup for memory and OOM reporting).
//   - box/container: hardened Docker or Podman argv, an injectable runner.
//   - box/microvm, box/e2b, box/remote: Firecracker builders, E2B's API,
//     the executor's interface.
//
// # Commands
//
// A [Command] is an argv (no shell) or a shell string (/bin/sh -c), files
// written into a fresh working directory (/work), host directories bound
// in ([Mount], read-only unless writable), stdin, an environment
// that holds only what is listed (default deny), credentials resolved
// when the run starts and never written anywhere else, no network by
// default, a host-enforced timeout (exit status 124, TimedOut), and
// [Limits]. Files the command leaves in /work/outputs come back in
// Result.Outputs.
//
// # What a command may make of a file
//
// One policy on every OS backend, for every file system the command can
// write (a writable [Mount], which the host sees; the working directory;
// /tmp): a command cannot give a file a privilege. Setting S_ISUID or
// S_ISGID (chmod, fchmod, fchmodat, and open, openat, creat or mknod with
// either bit in the mode) fails with EPERM, on files and directories
// alike; setting a file capability (setxattr of security.capability)
// fails with EPERM or EOPNOTSUPP; making a character or block device
// (mknod) fails with EPERM. Ordinary modes (0755, 0644, the sticky bit on
// one's own directory), FIFOs and sockets work. So no file a run leaves on
// the host is a setuid or setgid program, a capability-bearing binary or a
// device node, whichever user runs the box. bwrap enforces it with its
// seccomp filter (the bits) and the kernel (capabilities and devices need
// privileges the guest's user namespace does not confer); gVisor with the
// same rules in the OCI seccomp filter the sentry applies (runsc
// --oci-seccomp; it has no security.* extended attributes at all), and
// mounts the working directory and writable mounts nosuid, nodev. The
// cases are the conformance suite's (package boxtest), which every
// backend runs.
//
// # Network
//
// Network.Allow gives the command an HTTP(S) proxy (HTTP_PROXY and
// HTTPS_PROXY point at 127.0.0.1:3128 in a network namespace that has no
// other way out) which dials through httptool's rules (box/egress): one
// policy for the wasm guest's HTTP functions and every OS box.
// Network.Credentials is the credentials proxy mode: the proxy adds a
// header to the command's http://HOST/… requests for one allowed host
// (and may speak HTTPS to it), so the command never holds the secret.
//
// # The tool socket
//
// With Command.Tools set (glovebox.Runtime.ToolSession gives one), the
// command can call the host's tools through a unix socket whose path is in
// GLOVEBOX_TOOLS, with the same hooks, budgets and transcript as a Ruby
// eval. Client libraries are on the guest's PYTHONPATH and RUBYLIB:
//
//	from glovebox_tools import orders      # Python
//	GloveboxTools.orders(42)               # Ruby, after require "glovebox_tools"
//
// The wire format: a connection carries frames, each a decimal byte count,
// a newline, and that many bytes (at most 1 MiB + 1 KiB per request). A
// request is "call\n<name>\n<args>", where args is the JSON array
// [positional, keyword] (NaN and ±Infinity allowed) or nothing for no
// arguments, or "list". The reply is one of
//
//	n | t | f                 nil, true, false
//	s\n<UTF-8 string>
//	i\n<decimal integer>
//	j\n<JSON value>           everything else (list: the tool names)
//	err\n<Class>\n<message>   the tool raised; Class as in a Ruby eval
//	abort\n<status>\n<msg>    a budget or the deadline ended the session;
//	                          every later call gets the same answer
package box
