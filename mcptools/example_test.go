package mcptools_test

import (
	"context"
	"fmt"
	"os"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

type userKey struct{}

// Per-user bindings: one Toolset and one Runtime serve every user, and each
// user's calls reach a server started with that user's credentials. The
// host puts the user in the context it passes to Eval.
func ExampleBindKeyed() {
	exe, _ := os.Executable() // this test binary doubles as the MCP server
	ctx := context.Background()
	var ts glovebox.Toolset
	b, err := mcptools.BindKeyed(ctx, &ts, mcptools.Config{}, mcptools.Keyed{
		Key: func(ctx context.Context) (string, bool) {
			u, ok := ctx.Value(userKey{}).(string)
			return u, ok
		},
		Server: func(user string) (mcptools.Server, error) {
			// In real use: the user's token in Env or in Header.
			return mcptools.Server{Name: "crm", Command: []string{exe},
				Env: append(os.Environ(), "MCPTOOLS_TEST_SERVER=crm", "MCPTOOLS_TEST_USER="+user)}, nil
		},
		Probe: "probe",
	})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	for _, user := range []string{"alice", "bob", "alice"} {
		res, err := rt.Eval(context.WithValue(ctx, userKey{}, user), `whoami["text"]`)
		if err != nil {
			panic(err)
		}
		fmt.Println(user, "->", res.Value)
	}
	b.Drop("bob") // bob logged out: his server stops
	// Output:
	// alice -> alice
	// bob -> bob
	// alice -> alice
}
