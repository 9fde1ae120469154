package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox/internal/embed"
)

// embeddedCmd is the hidden `glovebox embedded`: the child the Ruby gem
// starts for itself (docs/embedded.md). It serves its one parent over
// the Unix socket it inherits as descriptor 3, runs the parent's evals
// in this process's engine and sends every tool call back; its log lines
// go to stderr as JSON, one a line, which the gem forwards to its
// logger. It ends when the socket does (the parent closed it or exited),
// or on SIGTERM.
func embeddedCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "embedded",
		Short:  "Serve the Ruby gem that started this process over descriptor 3 (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := os.NewFile(3, "glovebox-control")
			c, err := net.FileConn(f)
			if f != nil {
				f.Close()
			}
			uc, ok := c.(*net.UnixConn)
			if err != nil || !ok {
				return usageError{errors.New("embedded serves the Ruby gem over a Unix socket it inherits as descriptor 3; it is not run by hand")}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			slog.SetDefault(log)
			version, _, _ := strings.Cut(versionText(), "\n")
			return embed.Serve(ctx, uc, embed.Options{Version: version, Logger: log})
		},
	}
}
