package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
)

func evalCmd() *cobra.Command {
	var (
		code      []string
		asJSON    bool
		stdinFile string
		suspendTo string
		sb        sandboxFlags
		ap        approveFlags
		st        stateFlags
	)
	cmd := &cobra.Command{
		Use:   "eval [-e CODE | FILE | -] [-- ARG...]",
		Short: "Evaluate Ruby in a fresh sandbox and print the result",
		Long: `Evaluate Ruby code in a fresh WebAssembly VM. The code comes from -e, from a
file, or from standard input ("-"). Arguments after -- are the guest's ARGV
(at most 4096, 1 MiB together).

The guest's standard input ($stdin, STDIN; gets when ARGV is empty) is
glovebox's own when that is a pipe or a file (read to its end before the
guest starts, at most --stdin-limit bytes), or the file --stdin names; it
is empty when glovebox's standard input is a terminal or holds the code
("-"). A pipe that never closes makes glovebox wait: give --stdin
/dev/null.

Human mode streams the guest's output as it is written, then prints
"=> value" or the error. On a terminal, each line of guest output has a
"│ " gutter and control characters are shown escaped (^[ for ESC, <U+009B>
for C1 controls), so guest output cannot clear the screen, set the title
or the clipboard, or pass for glovebox's own lines; piped, it passes
through unchanged. With --json, one JSON object describes the result.

--mount HOST:GUEST[:rw] grants a host directory (read-only unless :rw);
--profile FILE loads limits, mounts and HTTP rules from a YAML file, which
the other flags override.
--http-allow PATTERN (repeatable; api.example.com or *.example.com) gives
the guest http_get, http_post and the other HTTP functions for those hosts;
private, loopback and cloud metadata addresses stay unreachable unless
--http-trust names their network; --http-port and --http-allow-ip-literals
widen the URL rules (for a development server: --http-allow 127.0.0.1
--http-allow-ip-literals --http-port 8080 --http-trust 127.0.0.1/32).

` + profileHelp + `
Sizes are bytes or a number with a unit (64KiB, 512MiB, 1GiB; KB, MB and
GB are powers of 1000); durations are a number with a unit (500ms, 10s,
2m). Every mistake in a flag or the profile exits 2 before anything runs.

Exit status: 0 when the eval ended ok, 1 for any other status (error,
timeout, fuel_exhausted, memory_limit, canceled, sandbox_error,
tool_budget_exceeded), 2 for usage or host errors, 3 when the eval was
suspended (--suspend-to).

--approve TOOL (repeatable) makes every call of TOOL wait for a person: on
a terminal glovebox asks; with --suspend-to FILE it writes the eval's
sealed state to FILE, prints the pending call (name, arguments, id) and
ends with status suspended, and glovebox resume FILE --approve, --deny
REASON or --answer JSON continues the eval from inside the call, in
another process, later. States are sealed with the key --state-key names
(default: state.key in the cache directory, made on first use).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var guestArgs []string
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				args, guestArgs = args[:dash], args[dash:]
			}
			if len(args) > 1 || cmd.Flags().Changed("code") && len(args) > 0 {
				return usageError{fmt.Errorf("unexpected argument %q: give the code with -e, a file or -, and the guest's arguments after --", args[len(args)-1])}
			}
			if len(guestArgs) > glovebox.MaxArgs {
				return usageError{fmt.Errorf("%d arguments after --, over the limit of %d", len(guestArgs), glovebox.MaxArgs)}
			}
			if n := len(strings.Join(guestArgs, "")); n > glovebox.MaxArgBytes {
				return usageError{fmt.Errorf("the arguments after -- are %d bytes together, over the limit of %d", n, glovebox.MaxArgBytes)}
			}
			src, err := source(strings.Join(code, "\n"), cmd.Flags().Changed("code"), args)
			if err != nil {
				return err
			}
			cfg, err := sb.config(cmd.Flags())
			if err != nil {
				return err
			}
			if err := suspendConfig(&cfg, &ap, &st, suspendTo); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			stdin, err := guestStdin(ctx, stdinFile, len(args) > 0 && args[0] == "-", cfg.Limits.Stdin)
			if err != nil {
				return err
			}
			rt, err := newRuntime(ctx, cfg)
			if err != nil {
				return err
			}
			defer rt.Close()
			opts := []glovebox.EvalOption{glovebox.WithArgs(guestArgs...)}
			if stdin != nil {
				opts = append(opts, glovebox.WithStdin(strings.NewReader(string(stdin))))
			}
			run := func(more ...glovebox.EvalOption) (*glovebox.Result, error) {
				return rt.EvalWith(ctx, src, append(opts, more...)...)
			}
			return printRun(rt, asJSON, run, func(res *glovebox.Result) error {
				return saveSuspended(res, rt, suspendTo, ap.tools, "eval")
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&code, "code", "e", nil, "Ruby code to evaluate (repeatable: the pieces run as one program, one per line, as ruby -e does)")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	f.StringVar(&stdinFile, "stdin", "", "file the guest reads as its standard input (default: glovebox's own, when piped)")
	f.StringVar(&suspendTo, "suspend-to", "", "when a call of an --approve tool needs approval, write the eval's state to this file and end with status suspended (answer it with glovebox resume FILE)")
	sb.register(f)
	ap.register(f)
	st.register(f)
	return cmd
}

func statusExit(res *glovebox.Result) error {
	switch res.Status {
	case glovebox.StatusOK:
		return nil
	case glovebox.StatusSuspended:
		return exitError{exitSuspended}
	}
	return exitError{exitStatus}
}

// printRun runs an eval (or a continuation) and prints its result: one
// JSON object with asJSON, else the guest's output streamed as it comes
// and then the value, the error or, for a suspended eval, the pending
// call. suspended (may be nil) handles a suspended Result first.
func printRun(rt *glovebox.Runtime, asJSON bool, run func(...glovebox.EvalOption) (*glovebox.Result, error), suspended func(*glovebox.Result) error) error {
	check := func(res *glovebox.Result) error {
		if res.Status == glovebox.StatusSuspended && suspended != nil {
			return suspended(res)
		}
		return nil
	}
	if asJSON {
		res, err := run()
		if err != nil {
			return err
		}
		if err := check(res); err != nil {
			return err
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res); err != nil {
			return err
		}
		return statusExit(res)
	}
	var mu sync.Mutex
	outSafe, errSafe := isTerminal(os.Stdout), isTerminal(os.Stderr)
	gout := newGuestWriter(&mu, os.Stdout, outSafe, false)
	gerr := newGuestWriter(&mu, os.Stderr, errSafe, true)
	res, err := run(glovebox.WithOutput(gout, gerr))
	gout.finish()
	gerr.finish()
	if err != nil {
		return err
	}
	if err := check(res); err != nil {
		return err
	}
	printHuman(res, rt.Limits(), outSafe, errSafe)
	return statusExit(res)
}

// source returns the code to run from -e, a file, or stdin.
func source(code string, haveE bool, args []string) (string, error) {
	switch {
	case haveE:
		return code, nil
	case len(args) == 0:
		return "", usageError{errors.New("nothing to evaluate: give -e CODE, a file, or - for standard input")}
	case args[0] == "-":
		const max = 64 << 20
		b, err := io.ReadAll(io.LimitReader(os.Stdin, max+1))
		if err == nil && len(b) > max {
			err = usageError{fmt.Errorf("the code on standard input is over %d MiB", max>>20)}
		}
		return string(b), err
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return "", usageError{err}
	}
	return string(b), nil
}

// guestStdin returns the guest's standard input: the --stdin file, else
// glovebox's own standard input unless that is a terminal or already
// held the code. nil means none. Over limit bytes is a usage error.
func guestStdin(ctx context.Context, file string, codeFromStdin bool, limit int) ([]byte, error) {
	if limit == 0 {
		limit = glovebox.DefaultStdin
	}
	var r io.Reader
	name := "standard input"
	switch {
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, usageError{fmt.Errorf("--stdin: %w", err)}
		}
		defer f.Close()
		r, name = f, "--stdin "+file
	case codeFromStdin || isTerminal(os.Stdin):
		return nil, nil
	default:
		r = os.Stdin
	}
	type read struct {
		b   []byte
		err error
	}
	ch := make(chan read, 1)
	go func() { // a pipe may stay open: Ctrl-C must still end glovebox
		b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
		ch <- read{b, err}
	}()
	select {
	case <-ctx.Done():
		return nil, usageError{fmt.Errorf("interrupted while reading %s for the guest", name)}
	case got := <-ch:
		if got.err != nil {
			return nil, usageError{fmt.Errorf("reading %s for the guest: %w", name, got.err)}
		}
		if len(got.b) > limit {
			return nil, usageError{fmt.Errorf("%s is over the %d-byte limit for the guest's input; raise it with --stdin-limit (or limits.stdin in the profile)", name, limit)}
		}
		return got.b, nil
	}
}

// printHuman prints the end of an eval whose output was streamed: a note
// for output cut at its limit, then the value or the error.
func printHuman(res *glovebox.Result, l glovebox.Limits, outSafe, errSafe bool) {
	if res.StdoutTruncated {
		fmt.Fprintf(os.Stderr, "glovebox: the guest's stdout was cut at %d bytes (--stdout-limit)\n", l.Stdout)
	}
	if res.StderrTruncated {
		fmt.Fprintf(os.Stderr, "glovebox: the guest's stderr was cut at %d bytes (--stderr-limit)\n", l.Stderr)
	}
	if res.Status == glovebox.StatusOK {
		fmt.Printf("=> %s\n", guestText(valueJSON(res), outSafe))
		return
	}
	if p := res.Pending; p != nil {
		fmt.Printf("suspended: %s(%s): %s (state %s)\n", p.Name, guestText(approvalArgs(p.Args), outSafe), guestText(p.Reason, outSafe), p.ID)
		return
	}
	e := res.Error
	fmt.Fprintf(os.Stderr, "%s: %s: %s\n", res.Status, guestText(e.Class, errSafe), guestText(e.Message, errSafe))
	for _, f := range e.Backtrace {
		fmt.Fprintf(os.Stderr, "\tfrom %s\n", guestText(f, errSafe))
	}
}
