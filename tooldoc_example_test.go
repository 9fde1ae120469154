package glovebox_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gloveboxhq/glovebox"
)

// Reflection names a Go function's parameters by position and infers
// their JSON Schemas; Describe adds what only the author knows.
func ExampleToolset_Describe() {
	var ts glovebox.Toolset
	if err := ts.Func("change_plan", func(ctx context.Context, plan string) (map[string]any, error) {
		return map[string]any{"plan": plan}, nil
	}); err != nil {
		log.Fatal(err)
	}
	if err := ts.Describe("change_plan", glovebox.ToolDoc{
		Description: "Moves the customer to another plan.",
		Params:      []glovebox.Param{{Name: "plan", Description: "basic or premium"}},
	}); err != nil {
		log.Fatal(err)
	}
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	for _, d := range rt.ToolDocs() {
		fmt.Println(d.Name, "-", d.Description)
		for _, p := range d.Params {
			fmt.Println(" ", p.Name, string(p.Schema), p.Required, "-", p.Description)
		}
		fmt.Println("  returns", string(d.Result))
	}
	// Output:
	// change_plan - Moves the customer to another plan.
	//   plan {"type":"string"} true - basic or premium
	//   returns {"type":["object","null"],"additionalProperties":{}}
}
