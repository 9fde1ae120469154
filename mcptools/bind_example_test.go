package mcptools_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// Two MCP servers' tools bound into one Toolset, for one Runtime and its
// code-mode tool (compiled, not run: it starts npx and dials a URL).
func ExampleBind() {
	ctx := context.Background()
	logger := slog.Default()
	token := os.Getenv("CRM_TOKEN")
	var ts glovebox.Toolset
	b, err := mcptools.Bind(ctx, &ts, mcptools.Config{Logger: logger},
		mcptools.Server{Name: "memory", Command: []string{"npx", "-y", "@modelcontextprotocol/server-memory"}},
		mcptools.Server{Name: "crm", URL: "https://crm.example/mcp", Header: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	tool, _ := codemode.New(codemode.Config{Runtime: rt, Servers: b.Notes()}) // server notes for the model
	res, _ := rt.Eval(ctx, `read_graph["structured"]["entities"].map { it["name"] }`)
	fmt.Println(tool.Name(), res.Value)
}
