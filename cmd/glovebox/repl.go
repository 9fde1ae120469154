package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"

	"github.com/peterh/liner"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gloveboxhq/glovebox"
)

func replCmd() *cobra.Command {
	var sb sandboxFlags
	var ap approveFlags
	var st stateFlags
	var load string
	cmd := &cobra.Command{
		Use:   "repl",
		Short: "An interactive Ruby session in the sandbox",
		Long: `Start an interactive session: one sandboxed VM whose variables, methods and
libraries persist from one input to the next. Each result shows its value or
error and its status; tool calls are shown as they happen. A trap (timeout,
fuel, memory) discards the VM, says so, and the next input starts fresh.

Line editing and history (kept in the glovebox cache directory) as in a
shell; an incomplete expression continues on the next line; Ctrl-C stops a
running eval or clears the line; Ctrl-D or "exit" ends the session. Limits
apply to each input.

":save FILE" writes the session's state (variables, methods, constants,
loaded libraries, the random generator) to FILE, sealed with the CLI's
state key, and the session goes on; "glovebox repl --load FILE" starts from
it, in another process, later, given the same sandbox flags (a different
sandbox is refused, with the difference named). A session whose guest
keeps a file open cannot be saved: close it first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := sb.config(cmd.Flags())
			if err != nil {
				return err
			}
			if err := ap.apply(&cfg, terminalApprover); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			safe := isTerminal(os.Stdout)
			cfg.Hooks.AfterCall = func(_ context.Context, c glovebox.ToolCall) { printCall(out, c, safe) }
			if cfg.StateKeys, err = st.keyring(); err != nil {
				return err
			}
			rt, err := newRuntime(context.Background(), cfg)
			if err != nil {
				return err
			}
			defer rt.Close()
			var s *glovebox.Session
			if load != "" {
				h, state, err := readStateFile(load)
				if err != nil {
					return err
				}
				if h != nil && h.Kind != kindSession {
					return usageError{fmt.Errorf("%s holds an eval paused at a tool call, not a REPL session: continue it with glovebox resume %s", load, load)}
				}
				if s, err = rt.ResumeSession(context.Background(), state); err != nil {
					return stateError(load, err)
				}
			} else if s, err = rt.NewSession(); err != nil {
				return err
			}
			return repl(s, rt, out, safe)
		},
	}
	sb.register(cmd.Flags())
	ap.register(cmd.Flags())
	st.register(cmd.Flags())
	cmd.Flags().StringVar(&load, "load", "", "start from a session :save wrote to this file")
	return cmd
}

func repl(s *glovebox.Session, rt *glovebox.Runtime, out io.Writer, safe bool) error {
	defer func() { s.Close() }()
	ln := liner.NewLiner()
	defer ln.Close()
	replLiner.Store(ln) // the terminal approver asks through it
	ln.SetCtrlCAborts(true)
	hist := ""
	if term.IsTerminal(int(os.Stdin.Fd())) {
		hist = historyPath() // piped input is not a person's history
	}
	if f, err := os.Open(hist); hist != "" && err == nil {
		ln.ReadHistory(f)
		f.Close()
	}
	defer func() {
		if hist == "" {
			return
		}
		if f, err := os.Create(hist); err == nil {
			ln.WriteHistory(f)
			f.Close()
		}
	}()
	lim := rt.Limits()
	fuel := "no fuel budget"
	if lim.Fuel > 0 {
		fuel = fmt.Sprintf("%d fuel", lim.Fuel)
	}
	fmt.Fprintf(out, "glovebox repl: Ruby %s in a sandbox; limits per input: %v timeout, %s memory, %s", "4.0", lim.Timeout, humanBytes(lim.Memory), fuel)
	if ms := rt.Mounts(); len(ms) > 0 {
		var parts []string
		for _, m := range ms {
			access := "ro"
			if m.Writable {
				access = "rw"
			}
			parts = append(parts, m.GuestPath+" ("+access+")")
		}
		fmt.Fprintf(out, "; mounts %s", strings.Join(parts, ", "))
	}
	if tools := rt.Tools(); len(tools) > 0 {
		fmt.Fprintf(out, "; tools %s", strings.Join(tools, ", "))
	}
	fmt.Fprintln(out, ".")
	fmt.Fprintln(out, "Values are shown as the JSON the host receives. Ctrl-C stops a running input and, like any limit, discards the session's state; Ctrl-D ends.")
	var pending []string
	var outMu sync.Mutex
	for {
		prompt := "rb> "
		if len(pending) > 0 {
			prompt = "..> "
		}
		line, err := ln.Prompt(prompt)
		switch {
		case errors.Is(err, liner.ErrPromptAborted):
			pending = nil
			continue
		case errors.Is(err, io.EOF):
			fmt.Fprintln(out)
			return nil
		case err != nil:
			return err
		}
		if len(pending) == 0 && (strings.TrimSpace(line) == "exit" || strings.TrimSpace(line) == "quit") {
			return nil
		}
		if len(pending) == 0 && strings.TrimSpace(line) == "" {
			continue
		}
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), ":save"); ok && len(pending) == 0 {
			ln.AppendHistory(line)
			var err error
			if s, err = save(s, rt, strings.TrimSpace(f), out); err != nil {
				return err
			}
			continue
		}
		pending = append(pending, line)
		ln.AppendHistory(line) // line by line, as typed
		code := strings.Join(pending, "\n")
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		gout, gerr := newGuestWriter(&outMu, out, safe, false), newGuestWriter(&outMu, out, safe, true)
		res, err := s.EvalWith(ctx, code, glovebox.WithOutput(gout, gerr))
		stop()
		gout.finish()
		gerr.finish()
		if err != nil {
			return err
		}
		if incomplete(res) {
			continue
		}
		pending = nil
		printResult(out, res, rt.Limits(), safe)
	}
}

// save writes the session's state to file and returns the session to go
// on with (Suspend closes the one it suspends). A session that cannot be
// suspended (a file open) goes on as it was.
func save(s *glovebox.Session, rt *glovebox.Runtime, file string, out io.Writer) (*glovebox.Session, error) {
	if file == "" {
		fmt.Fprintln(out, "[glovebox] :save FILE writes the session's state to FILE")
		return s, nil
	}
	ctx := context.Background()
	state, err := s.Suspend(ctx)
	if errors.Is(err, glovebox.ErrNotSuspendable) {
		fmt.Fprintf(out, "[glovebox] not saved: %v\n", err)
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := writeStateFile(file, kindSession, rt, nil, state); err != nil {
		fmt.Fprintf(out, "[glovebox] not saved: %v\n", err)
	} else {
		fmt.Fprintf(out, "[glovebox] saved the session to %s (%d KB); glovebox repl --load %s starts from it\n", file, len(state)/1000, file)
	}
	return rt.ResumeSession(ctx, state)
}

// incomplete reports a syntax error that only says the input ended
// early: the expression goes on on the next line. (A syntax error runs
// nothing, so trying costs no state.)
func incomplete(res *glovebox.Result) bool {
	if res.Status != glovebox.StatusError || res.Error == nil || res.Error.Class != "SyntaxError" {
		return false
	}
	// Ruby's parser says "unexpected end-of-input" (or, for strings and
	// heredocs, "unterminated ... end of file/EOF") when the input stops
	// early; "expecting end-of-input" means extra tokens: a real error.
	m := res.Error.Message
	return strings.Contains(m, "unexpected end-of-input") ||
		strings.Contains(m, "unterminated") && (strings.Contains(m, "end of file") || strings.Contains(m, "EOF"))
}

// printResult prints the end of an input whose output was streamed.
func printResult(out io.Writer, res *glovebox.Result, l glovebox.Limits, safe bool) {
	if res.StdoutTruncated {
		fmt.Fprintf(out, "[glovebox] stdout was cut at %d bytes (--stdout-limit)\n", l.Stdout)
	}
	if res.StderrTruncated {
		fmt.Fprintf(out, "[glovebox] stderr was cut at %d bytes (--stderr-limit)\n", l.Stderr)
	}
	if res.Status == glovebox.StatusOK {
		fmt.Fprintf(out, "=> %s\n", guestText(valueJSON(res), safe))
		return
	}
	e := res.Error
	fmt.Fprintf(out, "[%s] %s: %s\n", res.Status, guestText(e.Class, safe), guestText(e.Message, safe))
	for _, f := range e.Backtrace {
		fmt.Fprintf(out, "\tfrom %s\n", guestText(f, safe))
	}
	if res.SessionReset {
		fmt.Fprintln(out, "[session reset] the VM was discarded with its state; the next input starts fresh")
	}
}

// printCall shows a tool call as it ends; its arguments, result and error
// come from the guest or the tool and are escaped on a terminal.
func printCall(out io.Writer, c glovebox.ToolCall, safe bool) {
	args := callArgs(c.Args)
	if c.Elided {
		args = "…"
	}
	args = guestText(args, safe)
	if c.Error != "" {
		fmt.Fprintf(out, "  ↳ %s(%s) failed: %s (%v)\n", c.Name, args, guestText(c.Error, safe), c.Duration.Round(10_000))
		return
	}
	res := jsonNoEscape(c.Result)
	if len(res) > 200 {
		res = strings.ToValidUTF8(res[:200], "") + "…"
	}
	fmt.Fprintf(out, "  ↳ %s(%s) → %s (%v)\n", c.Name, args, guestText(res, safe), c.Duration.Round(10_000))
}

// jsonNoEscape is v as JSON without HTML escaping.
func jsonNoEscape(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func historyPath() string {
	dir, err := glovebox.DefaultCacheDir()
	if err != nil || os.MkdirAll(dir, 0o700) != nil {
		return ""
	}
	return filepath.Join(dir, "repl_history")
}

func humanBytes(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
