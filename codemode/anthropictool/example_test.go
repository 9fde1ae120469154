package anthropictool_test

import (
	"context"
	"fmt"
	"log"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/anthropictool"
)

// Support is example host state: the tools of one customer.
type Support struct{ CustomerID int }

func (s *Support) Orders() []map[string]any { return []map[string]any{{"id": 1, "total": 12.5}} }

func (s *Support) ChangePlan(plan string) string { return "now on " + plan }

// A model answers a customer's question with one code tool (compiled, not
// run: it needs ANTHROPIC_API_KEY and the network).
func Example() {
	ctx := context.Background()
	var ts glovebox.Toolset
	ts.Object(&Support{CustomerID: 42}, glovebox.Only("Orders", "ChangePlan"))
	ts.Describe("change_plan", glovebox.ToolDoc{
		Description: "Moves the customer to another plan.",
		Params:      []glovebox.Param{{Name: "plan", Description: "basic or premium"}},
	})
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	tool, err := codemode.New(codemode.Config{Runtime: rt})
	if err != nil {
		log.Fatal(err)
	}

	client := anthropic.NewClient() // ANTHROPIC_API_KEY
	answer, transcript, err := anthropictool.Run(ctx, client, tool, anthropic.MessageNewParams{
		Model: anthropic.ModelClaudeSonnet4_5, MaxTokens: 2048,
	}, "What did I spend on shipped orders this year?", 5)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(answer, len(transcript.Steps))
}
