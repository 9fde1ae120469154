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

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
)

func evalCmd() *cobra.Command {
	var (
		code   string
		asJSON bool
		sb     sandboxFlags
	)
	cmd := &cobra.Command{
		Use:   "eval [-e CODE | FILE | -]",
		Short: "Evaluate Ruby in a fresh sandbox and print the result",
		Long: `Evaluate Ruby code in a fresh WebAssembly VM. The code comes from -e, from a
file, or from standard input ("-"). The guest's output is printed, then
"=> value" or the error. With --json, one JSON object describes the result.

--mount HOST:GUEST[:rw] grants a host directory (read-only unless :rw);
--profile FILE loads limits and mounts from a YAML file, which the other
flags override.
--http-allow PATTERN (repeatable; api.example.com or *.example.com) gives
the guest http_get, http_post and the other HTTP functions for those hosts;
private, loopback and cloud metadata addresses stay unreachable.

Exit status: 0 when the eval ended ok, 1 for any other status (error,
timeout, fuel_exhausted, memory_limit, canceled, sandbox_error,
tool_budget_exceeded), 2 for usage or host errors.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := source(code, cmd.Flags().Changed("code"), args)
			if err != nil {
				return err
			}
			cfg, err := sb.config(cmd.Flags())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			rt, err := newRuntime(ctx, cfg)
			if err != nil {
				return err
			}
			defer rt.Close()
			res, err := rt.Eval(ctx, src)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				printHuman(res)
			}
			if res.Status != glovebox.StatusOK {
				return exitError{exitStatus}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&code, "code", "e", "", "Ruby code to evaluate")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	sb.register(f)
	return cmd
}

// source returns the code to run from -e, a file, or stdin.
func source(code string, haveE bool, args []string) (string, error) {
	switch {
	case haveE && len(args) > 0:
		return "", usageError{errors.New("give either -e CODE or a file, not both")}
	case haveE:
		return code, nil
	case len(args) == 0:
		return "", usageError{errors.New("nothing to evaluate: give -e CODE, a file, or - for standard input")}
	case args[0] == "-":
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		return string(b), err
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return "", usageError{err}
	}
	return string(b), nil
}

func printHuman(res *glovebox.Result) {
	os.Stdout.WriteString(res.Stdout)
	os.Stderr.WriteString(res.Stderr)
	if res.Status == glovebox.StatusOK {
		b, err := json.Marshal(&glovebox.Result{Status: res.Status, Value: res.Value}) // the value alone
		var v struct {
			Value json.RawMessage `json:"value"`
		}
		if err == nil && json.Unmarshal(b, &v) == nil {
			fmt.Printf("=> %s\n", v.Value)
		}
		return
	}
	e := res.Error
	fmt.Fprintf(os.Stderr, "%s: %s: %s\n", res.Status, e.Class, e.Message)
	for _, f := range e.Backtrace {
		fmt.Fprintf(os.Stderr, "\tfrom %s\n", f)
	}
	if strings.TrimSpace(e.Message) == "" {
		fmt.Fprintln(os.Stderr)
	}
}
