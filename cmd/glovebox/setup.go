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
	var mountSpecs []string
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Fetch the Ruby image, compile it (with and without fuel metering) and build the boot snapshots ahead of time",
		Long: `setup prepares, in the glovebox cache ($GLOVEBOX_CACHE_DIR, else ~/.cache/glovebox),
everything an eval can need, so that no eval waits for it: the plain Ruby image
(evals without a fuel budget) and the fuel-metered one (evals with one), each
compiled and booted into its snapshot. A platform gem or a release archive ships
both compiled beside this executable, so setup only boots them (seconds); built
from source, it compiles them (one to a few minutes on 2 cores), with progress on
stderr. Later runs check the cache and take well under a second. The Ruby image
comes from $GLOVEBOX_IMAGE, else a ruby+stdlib.wasm beside this executable, else npm.

A sandbox with mounts runs from a snapshot booted with its mount layout: the guest
paths in order (host paths and access do not matter). --mount HOST:GUEST[:rw], as
often as the sandbox has mounts and in its order, prepares that layout's snapshots
too (the host directories must exist); run setup once per layout your app uses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var mounts []glovebox.Mount
			for _, s := range mountSpecs {
				m, err := parseMount(s)
				if err != nil {
					return usageError{err}
				}
				mounts = append(mounts, m)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			start := time.Now()
			// Evals without a fuel budget run one compiled copy, evals with
			// one another (fuel.go): build both, so that neither compiles
			// on its first use.
			var res *glovebox.Result
			for i, v := range setupImages {
				t := time.Now()
				rt, err := glovebox.New(ctx, glovebox.Config{Progress: progress, PoolSize: -1, Limits: v.limits})
				if err == nil && len(mounts) > 0 {
					// The layout's snapshot: New builds it (NewPool), after
					// the image's own above.
					var lrt *glovebox.Runtime
					if lrt, err = glovebox.New(ctx, glovebox.Config{Progress: progress, PoolSize: -1, Limits: v.limits, Mounts: mounts}); err == nil {
						lrt.Close()
					}
					if err != nil {
						rt.Close()
					}
				}
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
				fmt.Fprintf(os.Stderr, "glovebox: image %d of %d, %s: ready (%.1fs)\n", i+1, len(setupImages), v.name, time.Since(t).Seconds())
			}
			dir, _ := glovebox.DefaultCacheDir()
			fmt.Printf("glovebox is ready (%s) in %.1fs; cache: %s\n", res.Value, time.Since(start).Seconds(), dir)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&mountSpecs, "mount", nil, "also prepare the snapshots for this mount layout: HOST:GUEST[:rw], repeated in the sandbox's order")
	return cmd
}

// setupImages are the compiled copies of the guest setup prepares.
var setupImages = []struct {
	name   string
	limits glovebox.Limits
}{
	{"the Ruby image for evals without a fuel budget", glovebox.Limits{}},
	{"the fuel-metered Ruby image for evals with a fuel budget", glovebox.Limits{Fuel: 1_000_000_000}},
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

// version is the release's version, set by the release build (make gem:
// -ldflags "-X main.version=0.1.0"); empty in other builds.
var version string

// versionText names this build (version when set, else the module
// version, else the VCS revision the go tool stamped, else "(devel)"), the
// Go toolchain, the pinned Ruby image and the wasmtime-go module linked
// in: the facts a bug report needs.
func versionText() string {
	v, goV, wasmtime := "(devel)", runtime.Version(), "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version != "" {
			v = version
		} else if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
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
