package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
)

// precompileCmd is the hidden `glovebox precompile DIR`: the release
// build (internal/release) runs it with each binary it ships — the arm64
// one under qemu-user — to compile the Ruby image's two variants (plain
// and fuel-metered) for that binary's architecture, with the baseline
// CPU features, into DIR under the names the engine looks for beside the
// binary. It prints one line per file, "NAME SHA256", on stdout; the
// release stamps those sums into the binary it packs.
func precompileCmd() *cobra.Command {
	var img string
	var names bool
	cmd := &cobra.Command{
		Use:    "precompile DIR",
		Short:  "Compile the Ruby image's variants for shipping beside this binary (release builds)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cacheDir, err := glovebox.DefaultCacheDir()
			if err != nil {
				return err
			}
			if img == "" {
				// The pinned image, beside this binary or cached; never
				// fetched here: the release passes the one it packs.
				p, fetch, err := image.Find(cacheDir)
				if err != nil {
					return err
				}
				if fetch {
					return usageError{errors.New("precompile: no Ruby image beside the binary or in the cache: pass --image")}
				}
				img = p
			}
			for _, noFuel := range []bool{true, false} {
				t := time.Now()
				cfg := engine.Config{ImagePath: img, CacheDir: filepath.Join(cacheDir, "engine"), NoFuel: noFuel, Progress: progress}
				if names {
					name, err := engine.PrecompiledName(cfg)
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), name)
					continue
				}
				name, err := engine.Precompile(cmd.Context(), cfg, args[0])
				if err != nil {
					return err
				}
				sum, err := image.FileSHA256(filepath.Join(args[0], name))
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "glovebox: %s compiled in %.1fs\n", name, time.Since(t).Seconds())
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", name, sum)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&img, "image", "", "the Ruby image to compile (default: the one glovebox would use)")
	cmd.Flags().BoolVar(&names, "names", false, "print the file names only, compiling nothing (a release reuses files it has)")
	return cmd
}
