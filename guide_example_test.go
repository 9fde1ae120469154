package glovebox_test

// Examples the guides in docs/ quote (internal/doccheck holds each quoted
// block to these lines).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Hooks see every tool call: BeforeCall may veto one, AfterCall gets its
// transcript entry, SanitizeError decides what the guest reads of a
// tool's error.
func ExampleHooks() {
	var ts glovebox.Toolset
	ts.Func("lookup", func(id int) (string, error) {
		if id == 2 {
			return "", errors.New("pq: connection to 10.0.0.5:5432 refused")
		}
		return fmt.Sprint("customer ", id), nil
	})
	ts.Func("delete_all", func() string { return "gone" })
	hooks := glovebox.Hooks{
		BeforeCall: func(ctx context.Context, tool string, args glovebox.Args) error {
			if tool == "delete_all" {
				return errors.New("delete_all is disabled in this deployment")
			}
			return nil
		},
		AfterCall: func(ctx context.Context, c glovebox.ToolCall) {
			fmt.Printf("after %s %v error=%q\n", c.Name, c.Args.Positional, c.Error)
		},
		SanitizeError: func(tool string, err error) string {
			return tool + " is unavailable" // never the host's own message
		},
	}
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, Hooks: hooks})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	res, err := rt.Eval(ctx, `
		[lookup(1),
		 (lookup(2) rescue $!.message),
		 (delete_all rescue $!.message)]`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Value)
	// Output:
	// after lookup [1] error=""
	// after lookup [2] error="lookup is unavailable"
	// after delete_all [] error="delete_all is disabled in this deployment"
	// [customer 1 lookup is unavailable delete_all is disabled in this deployment]
}

// A Session keeps one VM across evals: variables, methods and required
// libraries persist until a trap discards them (Result.SessionReset).
func ExampleRuntime_NewSession() {
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{Limits: glovebox.Limits{Timeout: 300 * time.Millisecond}})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	s, err := rt.NewSession()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	s.Eval(ctx, `rows = [3, 4, 5]; def total(rs) = rs.sum`)
	res, _ := s.Eval(ctx, `total(rows) * 2`)
	fmt.Println(res.Status, res.Value, res.SessionReset)

	res, _ = s.Eval(ctx, `loop {}`) // a trap: the session's VM is discarded
	fmt.Println(res.Status, res.SessionReset)
	res, _ = s.Eval(ctx, `defined?(rows).inspect`)
	fmt.Println(res.Value)
	// Output:
	// ok 24 false
	// timeout true
	// nil
}

// Mounts give the guest host directories, read-only unless Writable;
// /tmp is a private scratch directory wiped after each eval.
func ExampleMount() {
	dir, err := os.MkdirTemp("", "glovebox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	os.Mkdir(in, 0o755)
	os.Mkdir(out, 0o755)
	os.WriteFile(filepath.Join(in, "sales.csv"), []byte("region,total\nnorth,10\nsouth,32\n"), 0o644)

	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{
		Mounts: []glovebox.Mount{
			{HostPath: in, GuestPath: "/data", Description: "sales figures"},
			{HostPath: out, GuestPath: "/out", Writable: true},
		},
		Limits: glovebox.Limits{Timeout: 2 * time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	res, err := rt.Eval(ctx, `
		require "csv"
		sum = CSV.read("/data/sales.csv", headers: true).sum { _1["total"].to_i }
		File.write("/out/sum.txt", sum.to_s)
		[sum, (File.write("/data/x", "1") rescue $!.class.name)]`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, res.Value)
	b, _ := os.ReadFile(filepath.Join(out, "sum.txt"))
	fmt.Println(string(b))
	// Output:
	// ok [42 Errno::EROFS]
	// 42
}

// Profiles hold named configurations that never change once registered;
// a Runtime's limits can be narrowed for some evals with WithLimits.
func ExampleProfiles() {
	var ts glovebox.Toolset
	ts.Func("greet", func(name string) string { return "hello " + name })
	var p glovebox.Profiles
	err := p.Register("analyst", glovebox.Config{Limits: glovebox.Limits{Timeout: 5 * time.Second, Fuel: 2e9}, Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	err = p.Derive("analyst-quick", "analyst", func(c *glovebox.Config) { c.Limits.Timeout = time.Second })
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	rt, err := p.New(ctx, "analyst-quick") // ErrUnknownProfile for a name never registered
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	quick, err := rt.WithLimits(glovebox.Limits{Timeout: 500 * time.Millisecond}) // overrides only Timeout; Fuel stays 2e9
	if err != nil {
		log.Fatal(err)
	}
	res, _ := quick.Eval(ctx, `greet("ada")`)
	fmt.Println(res.Value, quick.Limits().Timeout, quick.Limits().Fuel)
	fmt.Println(strings.Join(p.Names(), " "))
	// Output:
	// hello ada 500ms 2000000000
	// analyst analyst-quick
}
