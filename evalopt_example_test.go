package glovebox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/gloveboxhq/glovebox"
)

func ExampleRuntime_EvalWith() {
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	res, err := rt.EvalWith(ctx, `puts "lines: #{$stdin.readlines.size}"; ARGV.first.upcase`,
		glovebox.WithStdin(strings.NewReader("a\nb\nc\n")),
		glovebox.WithArgs("report"),
		glovebox.WithOutput(os.Stdout, os.Stderr)) // printed as the guest writes it
	if err != nil {
		log.Fatal(err) // ErrInvalidInput for input over the limits
	}
	fmt.Println(res.Status, res.Value)
	// Output:
	// lines: 3
	// ok REPORT
}
