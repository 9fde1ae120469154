package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox/executor"
)

// evalWorkerCmd is the hidden `glovebox eval-worker`: the process an
// executor started with --eval-worker runs inside the sandbox for one eval
// (executor.ServeEvalWorker speaks the framed protocol on stdin/stdout).
func evalWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "eval-worker",
		Short:  "Serve one eval for an executor over stdin/stdout (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return executor.ServeEvalWorker(ctx, os.Stdin, os.Stdout)
		},
	}
}
