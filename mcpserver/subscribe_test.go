package mcpserver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// A client subscribed to a mounted file hears when it changes; a URI the
// server does not serve cannot be subscribed to; after unsubscribing, no
// more updates come.
func TestResourceSubscription(t *testing.T) {
	s, dir := newServer(t, glovebox.Limits{}, mcpserver.Options{WatchInterval: 10 * time.Millisecond})
	updated := make(chan string, 16)
	cs := connect(t, s, &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		updated <- r.Params.URI
	}})
	ctx := context.Background()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "file:///nowhere/x"}); err == nil {
		t.Fatal("subscribed to a URI the server does not serve")
	}
	uri := "file:///data/notes.txt"
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("changed, and longer than before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-updated:
		if got != uri {
			t.Fatalf("update for %q", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("no notifications/resources/updated after the file changed")
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
}
