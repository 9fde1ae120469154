package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/peterh/liner"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/gloveboxhq/glovebox"
)

// approveFlags are the approval flags mcp and repl share.
type approveFlags struct {
	tools   []string
	timeout time.Duration
}

func (a *approveFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&a.tools, "approve", nil, "a tool whose every call needs a person's approval (repeatable)")
	f.DurationVar(&a.timeout, "approval-timeout", 0, "longest wait for an approval before the call is denied (0: the default, 5m)")
}

// apply marks the tools and installs approver in cfg.
func (a *approveFlags) apply(cfg *glovebox.Config, approver func(context.Context, string, glovebox.Args) error) error {
	if len(a.tools) > 0 {
		if cfg.Tools == nil {
			cfg.Tools = &glovebox.Toolset{}
		}
		if err := cfg.Tools.RequireApproval(a.tools...); err != nil {
			have := strings.Join(cfg.Tools.Names(), ", ")
			if have == "" {
				have = "none (add tools with --http-allow or --mcp-server)"
			}
			return usageError{fmt.Errorf("--approve: %s; the tools here are: %s", strings.TrimPrefix(err.Error(), "glovebox: "), have)}
		}
	}
	if a.timeout > 0 {
		cfg.Limits.ApprovalTimeout = a.timeout
	}
	cfg.Hooks.Approver = approver
	return nil
}

// replLiner is the REPL's line editor while it runs: the terminal
// approver asks through it.
var replLiner atomic.Pointer[liner.State]

// terminalApprover asks on the REPL's terminal whether a tool call may
// run: "y" or "yes" approves; anything else, Ctrl-C or the eval's end
// denies. Without a terminal (input piped in) it denies: nobody is there
// to ask, and the answer would be read from the program's input.
func terminalApprover(ctx context.Context, tool string, args glovebox.Args) error {
	ln := replLiner.Load()
	if ln == nil || !term.IsTerminal(int(os.Stdin.Fd())) {
		return fmt.Errorf("%s needs a person's approval, and the REPL's input is not a terminal to ask on", tool)
	}
	type answer struct {
		text string
		err  error
	}
	ch := make(chan answer, 1)
	q := fmt.Sprintf("approve %s(%s)? [y/N] ", tool, approvalArgs(args))
	go func() {
		s, err := ln.Prompt(q)
		ch <- answer{s, err}
	}()
	select {
	case a := <-ch:
		switch {
		case a.err != nil:
			return errors.New("the user did not answer")
		case strings.EqualFold(strings.TrimSpace(a.text), "y"), strings.EqualFold(strings.TrimSpace(a.text), "yes"):
			return nil
		}
		return errors.New("the user declined the call")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// approvalArgs shows a call's arguments on one line as callArgs writes
// them (JSON escapes control characters, so a guest cannot write to the
// terminal through them), at most 200 bytes.
func approvalArgs(args glovebox.Args) string {
	s := callArgs(args)
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
