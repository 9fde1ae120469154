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

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
)

func evalCmd() *cobra.Command {
	var (
		code                    string
		asJSON                  bool
		limits                  glovebox.Limits
		memory, stdout, stderr_ string
		http                    httpFlags
	)
	cmd := &cobra.Command{
		Use:   "eval [-e CODE | FILE | -]",
		Short: "Evaluate Ruby in a fresh sandbox and print the result",
		Long: `Evaluate Ruby code in a fresh WebAssembly VM. The code comes from -e, from a
file, or from standard input ("-"). The guest's output is printed, then
"=> value" or the error. With --json, one JSON object describes the result.

Exit status: 0 when the eval ended ok, 1 for any other status (error,
timeout, fuel_exhausted, memory_limit, canceled, sandbox_error,
tool_budget_exceeded), 2 for usage or host errors.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := source(code, cmd.Flags().Changed("code"), args)
			if err != nil {
				return err
			}
			for _, f := range []struct {
				flag string
				val  string
				dst  func(uint64)
			}{
				{"memory", memory, func(n uint64) { limits.Memory = int64(n) }},
				{"stdout-limit", stdout, func(n uint64) { limits.Stdout = int(n) }},
				{"stderr-limit", stderr_, func(n uint64) { limits.Stderr = int(n) }},
			} {
				if f.val == "" {
					continue
				}
				n, err := humanize.ParseBytes(f.val)
				if err != nil {
					return usageError{fmt.Errorf("--%s: %w", f.flag, err)}
				}
				if n > 1<<40 {
					return usageError{fmt.Errorf("--%s: %s is too large", f.flag, f.val)}
				}
				f.dst(n)
			}
			tools, err := http.tools()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			rt, err := glovebox.New(ctx, glovebox.Config{Limits: limits, Tools: tools, Progress: progress, PoolSize: -1})
			if err != nil {
				if errors.Is(err, glovebox.ErrInvalidLimits) {
					return usageError{err}
				}
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
	f.DurationVar(&limits.Timeout, "timeout", 0, "wall-clock limit, a Go duration such as 2s (0: the default, 10s)")
	f.Uint64Var(&limits.Fuel, "fuel", 0, "CPU budget in wasmtime fuel units (0: no fuel budget)")
	f.StringVar(&memory, "memory", "", "linear memory limit, e.g. 512MiB or 1GiB (default 512MiB; at least the ~320MiB the booted guest occupies)")
	f.StringVar(&stdout, "stdout-limit", "", "bytes of stdout kept, e.g. 64KiB (0: the default, 1MiB)")
	f.StringVar(&stderr_, "stderr-limit", "", "bytes of stderr kept (0: the default, 64KiB)")
	http.add(f)
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
