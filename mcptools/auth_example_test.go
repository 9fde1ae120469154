package mcptools_test

import (
	"context"
	"log"
	"os"

	"golang.org/x/oauth2"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// userTokens stands for the host's own store of its users' tokens.
func userTokens(ctx context.Context, user string) (*oauth2.Token, error) {
	return &oauth2.Token{AccessToken: os.Getenv("TOKEN_" + user)}, nil
}

// Two HTTP servers behind OAuth: one authorized by glovebox itself (the
// user signs in once, in a browser; the tokens stay in this process), one
// with the host's own tokens, picked per request from the eval's context,
// so one Runtime serves every user (compiled, not run: it dials URLs).
func ExampleOAuth() {
	ctx := context.Background()
	open := func(ctx context.Context, authURL string) error {
		log.Printf("sign in at %s", authURL) // or start a browser
		return nil
	}
	var ts glovebox.Toolset
	b, err := mcptools.Bind(ctx, &ts, mcptools.Config{},
		mcptools.Server{Name: "docs", URL: "https://docs.example/mcp",
			OAuth: &mcptools.OAuth{ClientMetadataURL: "https://app.example/oauth/client.json", Open: open}},
		mcptools.Server{Name: "crm", URL: "https://crm.example/mcp",
			TokenSource: func(ctx context.Context, serverURL string) (*oauth2.Token, error) {
				user, _ := ctx.Value(userKey{}).(string)
				return userTokens(ctx, user)
			}})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts}); err == nil {
		defer rt.Close()
		// Ada's calls of crm's tools carry Ada's token.
		rt.Eval(context.WithValue(ctx, userKey{}, "ada"), `find_customer(name: "Babbage")`)
	}
}
