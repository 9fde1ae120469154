package glovebox_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/gloveboxhq/glovebox"
)

func ExampleToolset_RequireApproval() {
	var ts glovebox.Toolset
	ts.Func("refund", func(cents int) string { return fmt.Sprintf("refunded %d", cents) })
	ts.RequireApproval("refund")
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, Hooks: glovebox.Hooks{
		// A real approver asks a person; this one allows small refunds.
		Approver: func(_ context.Context, _ string, args glovebox.Args) error {
			if args.Positional[0].(int64) > 1000 {
				return errors.New("refunds over $10 need a manager")
			}
			return nil
		},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	res, err := rt.Eval(context.Background(), `
		[500, 5000].map do |c|
		  refund(c)
		rescue Glovebox::ToolDenied => e
		  "denied: #{e.message}"
		end`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Value)
	for _, c := range res.ToolCalls {
		fmt.Println(c.Name, c.Args.Positional, c.Approval)
	}
	// Output:
	// [refunded 500 denied: refunds over $10 need a manager]
	// refund [500] approved
	// refund [5000] denied
}
