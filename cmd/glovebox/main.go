// Command glovebox runs untrusted Ruby in a fresh WebAssembly VM and prints
// what it did.
//
//	glovebox eval -e 'puts 1 + 1'
//	glovebox eval script.rb --json
//	glovebox setup
//	glovebox bench
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Exit codes.
const (
	exitOK     = 0 // the eval ended ok
	exitStatus = 1 // the eval ended with any other status
	exitUsage  = 2 // bad usage, or a host-side failure
	// exitSuspended: the eval was suspended at a tool call and its state
	// written (eval --suspend-to, resume); glovebox resume continues it.
	exitSuspended = 3
)

// exitError carries an exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	// Descriptors this process inherited without close-on-exec (a
	// shell's "exec 7<file") reach no child, however it is started.
	spawn.CloseOnExecAll()
	runtime.GOMAXPROCS(maxProcs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0)))
	err := rootCmd().Execute()
	closeMCP() // stop the MCP servers (mcpflags.go)
	var ee exitError
	switch {
	case err == nil:
		os.Exit(exitOK)
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		msg := err.Error()
		if !strings.HasPrefix(msg, "glovebox: ") {
			msg = "glovebox: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(exitUsage)
	}
}

// rootCmd is the glovebox command with every subcommand, one file each.
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "glovebox",
		Short:         "Run untrusted code: Ruby in a fresh WebAssembly sandbox (eval, repl, mcp), any command in an OS-level sandbox (run, executor)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(evalCmd(), resumeCmd(), replCmd(), setupCmd(), benchCmd(), versionCmd(), mcpCmd())
	root.AddCommand(runCmd(), toolCmd())
	root.AddCommand(executorCmd(), evalWorkerCmd(), embeddedCmd(), precompileCmd())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{err}
	})
	return root
}

type usageError struct{ error }

// maxProcs is the GOMAXPROCS glovebox runs with: the environment's, when
// it sets one, else one more than Go's default (the usable CPUs). An eval
// runs inside one long cgo call; when every P is in one, Go's sysmon
// takes their Ps back every tick and wakes a thread to hand each to,
// stealing time from the evals on the cores they use. One spare P keeps
// sysmon asleep: with 2 workers on 2 CPUs, voluntary context switches
// per eval fell from 1.31–1.46 to 0.88–0.90 and process CPU per eval by
// 4% (docs/performance.md, "Two workers").
func maxProcs(env string, def int) int {
	if env != "" {
		return def // the runtime has applied it
	}
	return def + 1
}
