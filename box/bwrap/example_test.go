package bwrap_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/httptool"
)

// A command in bubblewrap with HTTP(S) to one host only, through the
// egress proxy applying httptool's rules (compiled, not run: it needs
// bwrap and the network; the backend suite runs the same for real).
func Example() {
	b, err := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{})})
	if err != nil {
		log.Fatal(err) // bwrap is not installed, say
	}
	res, err := b.Run(context.Background(), box.Command{
		Argv:    []string{"python3", "-c", "import urllib.request as u; print(u.urlopen('https://api.example.com/').status)"},
		Network: box.Network{Allow: []string{"api.example.com"}},
		Timeout: 10 * time.Second,
	})
	if err != nil {
		log.Fatal(err) // the sandbox could not start: box.ErrBackend
	}
	fmt.Println(res.ExitStatus, string(res.Stdout), res.Posture.Isolation, res.Posture.Trust)
}
