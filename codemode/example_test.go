package codemode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

func ExampleTool_Handle() {
	var ts glovebox.Toolset
	if err := ts.Func("orders", func() []map[string]any {
		return []map[string]any{{"id": 1, "total": 120.5}, {"id": 2, "total": 79.5}}
	}); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	tool, err := codemode.New(codemode.Config{Runtime: rt})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tool.Name())

	// What a model sends, and what it gets back.
	for _, input := range []string{
		`{"code": "orders.sum { |o| o[\"total\"] }"}`,
		`{"code": "orders.sum { |o| o[:total] }"}`,
		`{"program": "1"}`,
	} {
		out, err := tool.Handle(ctx, json.RawMessage(input))
		if err != nil {
			log.Fatal(err) // host-side only: the Runtime is closed, say
		}
		fmt.Println(out.IsError, string(out.Output))
	}
	// Output:
	// run_ruby
	// false {"status":"ok","value":200.0,"tool_calls":[{"name":"orders"}]}
	// true {"status":"error","error":{"class":"TypeError","message":"nil can't be coerced into Integer","backtrace":["sandbox:1:in 'Integer#+'","sandbox:1:in 'Array#sum'","sandbox:1:in '<main>'"]},"tool_calls":[{"name":"orders"}]}
	// true {"status":"invalid_input","error":{"class":"InvalidInput","message":"the input has no \"code\" field; send {\"code\": \"<a Ruby program>\"}"}}
}
