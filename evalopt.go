package glovebox

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// ErrInvalidInput wraps every rejection of an eval's input given by
// [EvalOption]s: standard input over Limits.Stdin, an error reading it,
// arguments over MaxArgs or MaxArgBytes, or an environment variable
// [WithEnv] refuses. The eval does not run.
var ErrInvalidInput = errors.New("glovebox: invalid eval input")

// Bounds on the arguments [WithArgs] gives one eval: at most MaxArgs
// strings of at most MaxArgBytes bytes together. They match the spirit
// of a host's argument list (Linux allows 2 MiB of argv and environment
// together): far above what a script takes, far below what would
// trouble the guest's memory.
const (
	MaxArgs     = 4096
	MaxArgBytes = 1 << 20
)

// EvalOption changes one eval of [Runtime.EvalWith] or [Session.EvalWith]: its
// input ([WithStdin], [WithArgs], [WithEnv]) or where its output also
// goes ([WithOutput]). Without options an eval has empty standard input,
// an empty ARGV, the ENV its VM has (empty in a fresh one) and its
// output only in the Result.
type EvalOption func(*evalOptions)

type evalOptions struct {
	stdin          io.Reader
	args           []string
	env            map[string]string
	envSet         bool
	stdout, stderr io.Writer
}

// WithStdin gives the guest r as its standard input: $stdin, STDIN and
// Kernel#gets read what r holds. Eval reads r to its end before the eval
// starts (it is not streamed), at most Limits.Stdin bytes (default
// DefaultStdin); a longer input, or an error from r, fails Eval with
// [ErrInvalidInput] and runs nothing. The bytes reach the guest as they
// are, read as UTF-8 strings (Encoding.default_external). A nil r means
// empty input.
func WithStdin(r io.Reader) EvalOption {
	return func(o *evalOptions) { o.stdin = r }
}

// WithArgs sets the guest's ARGV to args, as a script's command-line
// arguments. At most MaxArgs strings of MaxArgBytes bytes together; more
// fails Eval with [ErrInvalidInput]. Bytes that are not UTF-8 become
// U+FFFD. Note that Kernel#gets, like Ruby's, reads the files ARGV names
// (within the sandbox) before standard input; $stdin.read reads standard
// input only.
func WithArgs(args ...string) EvalOption {
	return func(o *evalOptions) { o.args = args }
}

// WithEnv sets the guest's ENV to exactly env when the eval starts:
// ENV.to_h equals env, whatever the VM had (a session's earlier evals
// included), and nothing of the host's environment is added. A nil or
// empty env empties ENV. Without WithEnv a fresh VM's ENV is empty and a
// session's keeps what its earlier evals set.
//
// A name must be non-empty and hold neither "=" nor a NUL byte; a value
// must hold no NUL byte (the C environment could not represent them).
// At most MaxArgs variables of MaxArgBytes bytes of names and values
// together, the bounds of WithArgs. Anything else fails Eval with
// [ErrInvalidInput], naming the variable, and runs nothing. Bytes that
// are not UTF-8 become U+FFFD. The guest's locale is US-ASCII, so Ruby
// reads a value that is not all ASCII as a binary (ASCII-8BIT) String:
// force_encoding("UTF-8") gives it back as text. Setting TZ has no
// effect in the guest (local time is always UTC).
func WithEnv(env map[string]string) EvalOption {
	return func(o *evalOptions) { o.env, o.envSet = env, true }
}

// CheckEnv reports whether [WithEnv] accepts env: nil, or an error
// wrapping [ErrInvalidInput] that names the first variable refused (a
// name empty or holding "=" or NUL, a value holding NUL, more than
// MaxArgs variables or MaxArgBytes bytes). A program that takes an
// environment from its own users checks it once, when it is given,
// rather than at each eval.
func CheckEnv(env map[string]string) error {
	_, err := envList(env)
	return err
}

// envList checks env (WithEnv's rules) and returns it as sorted
// "NAME=value" entries, never nil.
func envList(env map[string]string) ([]string, error) {
	if len(env) > MaxArgs {
		return nil, fmt.Errorf("%w: %d environment variables, over the limit of %d (MaxArgs)", ErrInvalidInput, len(env), MaxArgs)
	}
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]string, 0, len(env))
	n := 0
	for _, k := range names {
		v := env[k]
		switch {
		case k == "":
			return nil, fmt.Errorf("%w: an environment variable has an empty name", ErrInvalidInput)
		case strings.ContainsAny(k, "=\x00"):
			return nil, fmt.Errorf("%w: environment variable name %q holds \"=\" or a NUL byte", ErrInvalidInput, k)
		case strings.IndexByte(v, 0) >= 0:
			return nil, fmt.Errorf("%w: the value of environment variable %q holds a NUL byte", ErrInvalidInput, k)
		}
		if n += len(k) + len(v); n > MaxArgBytes {
			return nil, fmt.Errorf("%w: the environment is over %d bytes of names and values (MaxArgBytes)", ErrInvalidInput, MaxArgBytes)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// WithOutput makes the guest's stdout and stderr also go to the given
// writers as the guest writes them (either may be nil), for showing
// progress while an eval runs. They receive exactly the bytes the Result
// keeps (up to Limits.Stdout and Limits.Stderr, without the truncation
// marker; invalid UTF-8 is passed through, while the Result replaces it),
// in the order written; the Result's Stdout and Stderr are unchanged.
// Each write is made synchronously on the goroutine running the eval,
// and never after Eval returns: a writer that blocks holds the guest
// (though not past the eval's deadline for Eval's caller, which then
// gives up on the VM). Write errors are ignored.
func WithOutput(stdout, stderr io.Writer) EvalOption {
	return func(o *evalOptions) { o.stdout, o.stderr = stdout, stderr }
}

// applyOptions fills req from opts, within l.
func applyOptions(req *engine.Request, l Limits, opts []EvalOption) error {
	var o evalOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.stdin != nil {
		b, err := io.ReadAll(io.LimitReader(o.stdin, int64(l.Stdin)+1))
		if err != nil {
			return fmt.Errorf("%w: reading standard input: %v", ErrInvalidInput, err)
		}
		if len(b) > l.Stdin {
			return fmt.Errorf("%w: standard input is over the %d-byte limit (Limits.Stdin)", ErrInvalidInput, l.Stdin)
		}
		req.Stdin = b
	}
	if len(o.args) > MaxArgs {
		return fmt.Errorf("%w: %d arguments, over the limit of %d (MaxArgs)", ErrInvalidInput, len(o.args), MaxArgs)
	}
	n := 0
	for _, a := range o.args {
		if n += len(a); n > MaxArgBytes {
			return fmt.Errorf("%w: the arguments are over %d bytes together (MaxArgBytes)", ErrInvalidInput, MaxArgBytes)
		}
	}
	req.Args = o.args
	if o.envSet {
		env, err := envList(o.env)
		if err != nil {
			return err
		}
		req.Env = env
	}
	if o.stdout != nil {
		req.StdoutTee = o.stdout
	}
	if o.stderr != nil {
		req.StderrTee = o.stderr
	}
	return nil
}
