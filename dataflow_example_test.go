package glovebox_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gloveboxhq/glovebox"
)

// Labels keep a customer's email out of what the model reads: the
// program computes with the real value, the Result shows a token, and
// only a tool whose SinkPolicy accepts emails receives one.
func ExampleToolset_Label() {
	var ts glovebox.Toolset
	ts.Func("profile", func() map[string]string { return map[string]string{"name": "Sam", "email": "sam@example.net"} })
	ts.Func("lookup_customer", func(email string) bool { return email == "sam@example.net" })
	ts.Func("create_ticket", func(body string) string { return "opened" })
	ts.Label("profile", glovebox.Label{Kind: glovebox.KindEmail, Path: "email"})
	ts.Sink("lookup_customer", glovebox.SinkPolicy{Accepts: []glovebox.Kind{glovebox.KindEmail}})

	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	res, err := rt.Eval(context.Background(), `e = profile["email"]
		begin
		  create_ticket("Write to #{e.upcase}")
		rescue Glovebox::ToolDenied => x
		  puts x.message
		end
		[e.end_with?("example.net"), lookup_customer(e), e]`)
	if err != nil {
		log.Fatal(err)
	}
	v := res.Value.([]any)
	fmt.Print(res.Stdout)
	fmt.Println(v[0], v[1], v[2] != "sam@example.net", res.Reveal(v[2].(string)))
	// Output:
	// create_ticket may not receive email data: argument 1 holds a labelled email value (in any case or spacing)
	// true true true sam@example.net
}
