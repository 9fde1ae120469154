package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
)

func setupCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "setup",
		Short: "Fetch the Ruby image, compile it and build the boot snapshot ahead of time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			start := time.Now()
			rt, err := glovebox.New(ctx, glovebox.Config{Progress: progress, PoolSize: -1})
			if err != nil {
				return err
			}
			defer rt.Close()
			res, err := rt.Eval(ctx, "RUBY_DESCRIPTION")
			if err != nil {
				return err
			}
			if err := res.Err(); err != nil {
				return err
			}
			dir, _ := glovebox.DefaultCacheDir()
			fmt.Printf("glovebox is ready (%s) in %.1fs; cache: %s\n", res.Value, time.Since(start).Seconds(), dir)
			return nil
		},
	}
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print glovebox's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Println("glovebox", v)
		},
	}
}
