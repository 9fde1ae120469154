package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/image"
)

func setupCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "setup",
		Short: "Fetch the Ruby image, compile it (with and without fuel metering) and build the boot snapshots ahead of time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			start := time.Now()
			// Evals without a fuel budget run one compiled copy, evals with
			// one another (fuel.go): build both, so that neither compiles
			// on its first use.
			var res *glovebox.Result
			for _, lim := range []glovebox.Limits{{}, {Fuel: 1_000_000_000}} {
				rt, err := glovebox.New(ctx, glovebox.Config{Progress: progress, PoolSize: -1, Limits: lim})
				if err != nil {
					return err
				}
				res, err = rt.Eval(ctx, "RUBY_DESCRIPTION")
				rt.Close()
				if err != nil {
					return err
				}
				if err := res.Err(); err != nil {
					return err
				}
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
		Short: "Print glovebox's version, the Ruby image and the wasmtime it runs on",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprint(cmd.OutOrStdout(), versionText())
		},
	}
}

// versionText names this build (the module version, else the VCS revision
// the go tool stamped, else "(devel)"), the Go toolchain, the pinned Ruby
// image and the wasmtime-go module linked in: the facts a bug report needs.
func versionText() string {
	v, goV, wasmtime := "(devel)", runtime.Version(), "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		} else {
			var rev, modified string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if rev != "" {
				v = "(devel) " + rev[:min(12, len(rev))]
				if modified == "true" {
					v += "+dirty"
				}
			}
		}
		for _, d := range bi.Deps {
			if strings.HasPrefix(d.Path, "github.com/bytecodealliance/wasmtime-go") {
				wasmtime = d.Version
			}
		}
	}
	return fmt.Sprintf("glovebox %s\n  go:        %s\n  image:     %s@%s (Ruby 4.0, wasm32-wasi)\n  wasmtime:  wasmtime-go %s\n",
		v, goV, image.Package, image.Version, wasmtime)
}
