package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gloveboxhq/glovebox"
)

func resumeCmd() *cobra.Command {
	var (
		approve   bool
		deny      string
		answer    string
		asJSON    bool
		suspendTo string
		sb        sandboxFlags
		st        stateFlags
	)
	cmd := &cobra.Command{
		Use:   "resume FILE (--approve | --deny REASON | --answer JSON)",
		Short: "Continue an eval that glovebox eval --suspend-to paused at a tool call",
		Long: `Continue, in this process, an eval that glovebox eval --approve TOOL
--suspend-to FILE paused at a call that needs approval. The answer is one of:
--approve runs the call's tool here and gives the guest its result; --deny
REASON raises Glovebox::ToolDenied with REASON in the guest; --answer JSON
returns JSON as the call's value, the tool not running. The eval runs on
from inside the call as if it had never stopped, and glovebox prints its
result as eval does (the output made after the pause, streamed, then the
value or error; with --json the whole eval's Result) with the same exit
codes. A later call that needs approval pauses it again: the new state
replaces FILE (or goes to --suspend-to).

Give the flags that shape the sandbox as the eval was given them (the
tools of --mcp-server, --mcp-url and --http-allow, --mount, the limits,
--profile): the state names what it needs and a different sandbox is
refused, with the difference named (exit 2). So is a state damaged,
truncated, or sealed with another key (see --state-key): nothing runs.

Each file continues at most once: glovebox records the files it continued
in the cache directory and refuses a second resume of one, since the tool
calls after the pause would run again (a copy under another name is a new
file). The record is taken when the continuation reaches the paused call:
a resume that could not replay the eval to it (a mounted file it read
changed meanwhile) or was stopped on the way leaves FILE to resume again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			n := 0
			for _, set := range []bool{approve, cmd.Flags().Changed("deny"), cmd.Flags().Changed("answer")} {
				if set {
					n++
				}
			}
			if n != 1 {
				return usageError{errors.New("give exactly one answer: --approve, --deny REASON or --answer JSON")}
			}
			a := glovebox.Answer{Approved: approve}
			if cmd.Flags().Changed("deny") {
				a = glovebox.Answer{Denied: true, Reason: deny}
			}
			if cmd.Flags().Changed("answer") {
				v, err := decodeAnswer(answer)
				if err != nil {
					return usageError{fmt.Errorf("--answer: %w", err)}
				}
				a = glovebox.Answer{Value: v}
			}
			h, state, err := readStateFile(path)
			if err != nil {
				return err
			}
			if h != nil && h.Kind == kindSession {
				return usageError{fmt.Errorf("%s holds a saved REPL session, not a paused eval: load it with glovebox repl --load %s", path, path)}
			}
			cfg, err := sb.config(cmd.Flags())
			if err != nil {
				return err
			}
			ap := approveFlags{}
			if h != nil {
				ap.tools = h.Approve
				if missing := missingTools(h.Tools, cfg.Tools); len(missing) > 0 {
					return usageError{fmt.Errorf("%s was written by a command with the tools %s; this one lacks %s: give the same tool flags (--http-allow, --mcp-server, --mcp-url, --profile) as that command", path, strings.Join(h.Tools, ", "), strings.Join(missing, ", "))}
				}
			}
			if suspendTo == "" {
				suspendTo = path
			}
			if err := suspendConfig(&cfg, &ap, &st, suspendTo); err != nil {
				return fmt.Errorf("%w\nthe state's tools that need approval are %v: give the same tool flags as the command that wrote %s", err, ap.tools, path)
			}
			claims, err := stateStore(path)
			if err != nil {
				return err
			}
			cfg.StateStore = claims
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			rt, err := newRuntime(ctx, cfg)
			if err != nil {
				return err
			}
			defer rt.Close()
			run := func(opts ...glovebox.EvalOption) (*glovebox.Result, error) {
				res, err := rt.Continue(ctx, state, a, opts...)
				if err != nil {
					return nil, stateError(path, err)
				}
				if stopped := res.Status == glovebox.StatusCanceled || res.Status == glovebox.StatusTimeout; stopped && claims.claimed.Load() {
					fmt.Fprintf(os.Stderr, "glovebox: %s is spent: a paused eval continues once, and this continuation was stopped after its paused call was answered\n", path)
				} else if stopped {
					fmt.Fprintf(os.Stderr, "glovebox: this continuation was stopped before it reached its paused call; nothing after the pause ran, and %s can be resumed again\n", path)
				}
				return res, nil
			}
			return printRun(rt, asJSON, run, func(res *glovebox.Result) error {
				return saveSuspended(res, rt, suspendTo, ap.tools, "resume")
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&approve, "approve", false, "approve the pending call: its tool runs now, here")
	f.StringVar(&deny, "deny", "", "deny the pending call: the guest sees Glovebox::ToolDenied with this reason")
	f.StringVar(&answer, "answer", "", "answer the pending call with this JSON value instead of running its tool")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	f.StringVar(&suspendTo, "suspend-to", "", "where the state goes if the eval pauses again (default: FILE itself)")
	sb.register(f)
	st.register(f)
	return cmd
}

// missingTools lists the names of want that ts (nil: no tools) lacks.
func missingTools(want []string, ts *glovebox.Toolset) []string {
	var have []string
	if ts != nil {
		have = ts.Names()
	}
	var missing []string
	for _, n := range want {
		if !slices.Contains(have, n) {
			missing = append(missing, n)
		}
	}
	return missing
}

// decodeAnswer reads --answer's JSON: integers stay exact (int64, or a
// big integer's decimal string is refused as not fitting).
func decodeAnswer(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return numbers(v)
}

func numbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("the number %s does not fit", x)
		}
		return f, nil
	case []any:
		for i := range x {
			var err error
			if x[i], err = numbers(x[i]); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for k := range x {
			var err error
			if x[k], err = numbers(x[k]); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// suspendConfig marks ap's tools as needing approval and installs the
// approver: with suspendTo, one that suspends the eval (and the CLI's
// state key); else one that asks on the terminal.
func suspendConfig(cfg *glovebox.Config, ap *approveFlags, st *stateFlags, suspendTo string) error {
	if len(ap.tools) == 0 {
		return nil
	}
	approver := askApprover
	if suspendTo != "" {
		if fi, err := os.Stat(filepath.Dir(suspendTo)); err != nil || !fi.IsDir() {
			return usageError{fmt.Errorf("--suspend-to %s: the directory %s does not exist", suspendTo, filepath.Dir(suspendTo))}
		}
		keys, err := st.keyring()
		if err != nil {
			return err
		}
		cfg.StateKeys = keys
		approver = func(context.Context, string, glovebox.Args) error {
			return glovebox.SuspendCall("needs a person's approval")
		}
	}
	return ap.apply(cfg, approver)
}

// askApprover asks on the terminal whether a call may run ("y" or "yes"
// approves). Without a terminal it denies, saying how to pause instead.
func askApprover(ctx context.Context, tool string, args glovebox.Args) error {
	if !term.IsTerminal(int(os.Stdin.Fd())) || !term.IsTerminal(int(os.Stderr.Fd())) {
		return fmt.Errorf("%s needs a person's approval and there is no terminal to ask on: run glovebox eval with --suspend-to FILE to pause here, then glovebox resume FILE --approve", tool)
	}
	fmt.Fprintf(os.Stderr, "approve %s(%s)? [y/N] ", tool, guestText(approvalArgs(args), true))
	ch := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		ch <- strings.TrimSpace(line)
	}()
	select {
	case a := <-ch:
		if strings.EqualFold(a, "y") || strings.EqualFold(a, "yes") {
			return nil
		}
		return errors.New("the user declined the call")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// saveSuspended writes a suspended eval's state to path and says how to
// continue it (on stderr, so that --json's stdout stays one object).
func saveSuspended(res *glovebox.Result, rt *glovebox.Runtime, path string, approve []string, _ string) error {
	if err := writeStateFile(path, kindEval, rt, approve, res.State); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "glovebox: the eval is suspended in its call to %s; its state is in %s.\nglovebox: continue it with: glovebox resume %s --approve (or --deny REASON, or --answer JSON), with the same sandbox flags\n", res.Pending.Name, path, path)
	return nil
}

// stateStore is the StateStore resume gives its Runtime: a DirStateStore
// in the cache directory where each claim is of the state in this file
// (see fileClaims).
func stateStore(path string) (*fileClaims, error) {
	dir, err := glovebox.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	dir = filepath.Join(dir, "states-continued")
	st, err := glovebox.NewDirStateStore(dir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	return &fileClaims{store: st, dir: dir, path: path, abs: abs}, nil
}

// fileClaims claims a state file's continuation: the claim's key is a
// hash of the state's id and the file's absolute path, so the same file
// continues at most once (a second resume of it is refused) while a copy
// made on purpose under another name is a new file (to try both answers
// to one pause, say). Servers that hand states to clients use
// glovebox.Config.StateStore keyed by state id alone.
type fileClaims struct {
	store     glovebox.StateStore
	dir       string
	path, abs string
	claimed   atomic.Bool // the continuation reached its call and claimed the file
}

// Claim implements glovebox.StateStore; the Runtime calls it when the
// continuation's replay reaches the paused call, before it is answered.
func (c *fileClaims) Claim(ctx context.Context, id string) error {
	sum := sha256.Sum256(bytes.Join([][]byte{[]byte(id), []byte(c.abs)}, []byte{0}))
	err := c.store.Claim(ctx, hex.EncodeToString(sum[:16]))
	if errors.Is(err, glovebox.ErrStateUsed) {
		return fmt.Errorf("%w: %s was continued before (state %s): a paused eval continues at most once, since the tool calls after the pause would run again (the record is in %s)", glovebox.ErrStateUsed, c.path, id, c.dir)
	}
	if err == nil {
		c.claimed.Store(true)
	}
	return err
}
