package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/httptool"
)

// newBox makes the box named by --box.
func newBox(name string) (box.Box, error) {
	switch name {
	case "bwrap", "bubblewrap":
		return bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{})})
	case "gvisor", "runsc":
		return newGVisor()
	case "null":
		return box.Null{}, nil
	}
	return nil, usageError{fmt.Errorf("unknown box %q (bwrap, gvisor, null)", name)}
}

func runCmd() *cobra.Command {
	var (
		boxName, network, memory string
		files, envs              []string
		pids                     int
		timeout                  string
		asJSON                   bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- ARGV...",
		Short: "Run a command in an OS-level sandbox (bubblewrap, gVisor) and print what it did",
		Long: `Run a command in a fresh OS-level sandbox. ARGV is executed directly (no
shell); use "sh -c '...'" for shell syntax. The command sees only the
environment given with --env, no network unless --network allow:HOST, a
read-only /usr, a private /tmp and a fresh working directory holding the
--file files; files it leaves in ./outputs are read back.

Exit status: the command's (124 on timeout), or 2 for usage or host errors.
With --json, one JSON object describes the result (stdout, stderr,
exit_status, timed_out, killed_for_memory, duration_ms, backend,
isolation, trust, off_host, outputs).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := newBox(boxName)
			if err != nil {
				return err
			}
			c := box.Command{Argv: args, Env: map[string]string{}, Files: map[string][]byte{}}
			for _, f := range files {
				name, path, ok := strings.Cut(f, "=")
				if !ok {
					return usageError{fmt.Errorf("--file %q: want NAME=PATH", f)}
				}
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				c.Files[name] = data
			}
			for _, e := range envs {
				k, v, ok := strings.Cut(e, "=")
				if !ok {
					return usageError{fmt.Errorf("--env %q: want K=V", e)}
				}
				c.Env[k] = v
			}
			switch {
			case network == "none" || network == "":
			case strings.HasPrefix(network, "allow:"):
				c.Network.Allow = strings.Split(strings.TrimPrefix(network, "allow:"), ",")
			default:
				return usageError{fmt.Errorf("--network %q: want none or allow:HOST[,HOST]", network)}
			}
			if timeout != "" {
				d, err := parseDuration("--timeout", timeout)
				if err != nil {
					return usageError{fmt.Errorf("--timeout: %v", err)}
				}
				c.Timeout = d
			}
			if memory != "" {
				n, err := humanize.ParseBytes(memory)
				if err != nil {
					return usageError{fmt.Errorf("--memory: %v", err)}
				}
				c.Limits.Memory = int64(n)
			}
			c.Limits.Pids = pids
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			if !asJSON {
				c.Stream = func(stream int, p []byte) {
					if stream == 1 {
						os.Stdout.Write(p)
					} else {
						os.Stderr.Write(p)
					}
				}
			}
			res, err := b.Run(ctx, c)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else if res.TimedOut {
				fmt.Fprintf(os.Stderr, "glovebox: the command timed out (exit 124)\n")
			}
			if res.ExitStatus != 0 {
				return exitError{res.ExitStatus}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&boxName, "box", "bwrap", "the sandbox: bwrap, gvisor or null")
	f.StringArrayVar(&files, "file", nil, "NAME=PATH: put the host file PATH in the working directory as NAME (repeatable)")
	f.StringArrayVar(&envs, "env", nil, "K=V: set an environment variable (repeatable; nothing else is passed)")
	f.StringVar(&network, "network", "none", "none, or allow:HOST[,HOST] for HTTP(S) through the egress proxy")
	f.StringVar(&timeout, "timeout", "", "wall-clock limit (e.g. 10s; default 30s)")
	f.StringVar(&memory, "memory", "", "memory limit (e.g. 256MiB; default 512MiB)")
	f.IntVar(&pids, "pids", 0, "process limit (default 128)")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	return cmd
}

func newGVisor() (box.Box, error) { return gvisor.New(gvisor.Config{}) }
