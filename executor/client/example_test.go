package client_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"log"
	"os"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// A command run off-host through an executor, as a box.Box (compiled, not
// run: it needs an executor listening; the executor tests start one).
func Example() {
	ctx := context.Background()
	pem, err := os.ReadFile("tls/cert.pem")
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tok := os.Getenv("EXECUTOR_TOKEN")
	printOutput := func(stream int, p []byte) { os.Stdout.Write(p) }

	c, err := client.Dial(ctx, client.Config{URL: "https://127.0.0.1:8443", Token: tok, RootCAs: pool}) // executor/client
	if err != nil {
		log.Fatal(err)
	}
	b := remote.New(c, nil) // a box.Box, off-host
	res, err := b.Run(ctx, box.Command{Argv: []string{"python3", "-c", "print(2+2)"}, Stream: printOutput})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ExitStatus, string(res.Stdout))
}

// Evals off-host whose tool calls come back to this process's Runtime
// (compiled, not run: it needs an executor started with --evals).
func ExampleClient_Evaluator() {
	ctx := context.Background()
	var c *client.Client // from client.Dial, as above
	var ts glovebox.Toolset
	ts.Func("orders", func() []int { return []int{1, 2} })
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	tool, _ := codemode.New(codemode.Config{Runtime: rt, Evaluator: c.Evaluator(rt)}) // was: Config{Runtime: rt}
	fmt.Println(tool.Name())
}
