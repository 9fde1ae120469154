package glovebox

import (
	"errors"
	"fmt"
	"io"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// ErrInvalidInput wraps every rejection of an eval's input given by
// [EvalOption]s: standard input over Limits.Stdin, an error reading it,
// or arguments over MaxArgs or MaxArgBytes. The eval does not run.
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
// input ([WithStdin], [WithArgs]) or where its output also goes
// ([WithOutput]). Without options an eval has empty standard input, an
// empty ARGV and its output only in the Result.
type EvalOption func(*evalOptions)

type evalOptions struct {
	stdin          io.Reader
	args           []string
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
	if o.stdout != nil {
		req.StdoutTee = o.stdout
	}
	if o.stderr != nil {
		req.StderrTee = o.stderr
	}
	return nil
}
