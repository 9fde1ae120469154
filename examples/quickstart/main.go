// Command quickstart is the README's first Go program: a Runtime with one
// tool, one eval of untrusted Ruby that calls it, and the Result.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/gloveboxhq/glovebox"
)

func main() {
	ctx := context.Background()

	// A tool is any Go function; the guest calls it by name.
	var tools glovebox.Toolset
	err := tools.Func("shout", func(s string) string { return strings.ToUpper(s) + "!" })
	if err != nil {
		log.Fatal(err)
	}

	// The first New on a machine fetches and compiles the Ruby image
	// (minutes, once; cached under ~/.cache/glovebox).
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &tools})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	// The code is untrusted: it reaches nothing but the tools.
	res, err := rt.Eval(ctx, `puts shout("hello"); [1, 2, 3].sum * 7`)
	if err != nil {
		log.Fatal(err) // host-side failures only; the guest's own are statuses
	}
	fmt.Println(res.Status, res.Value) // ok 42
	fmt.Print(res.Stdout)              // HELLO!
	for _, c := range res.ToolCalls {
		fmt.Println("called", c.Name, c.Args.Positional, "->", c.Result) // called shout [hello] -> HELLO!
	}
}
