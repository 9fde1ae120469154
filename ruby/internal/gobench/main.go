// Command gobench is the Go half of the gem's benchmark
// (ruby/bench/bench.rb): n evals of `add(20, 22)`, one tool call each
// answered by this process, through an executor, with glovebox's Go
// client. It prints one line: "go n=N p50_ms=X mean_ms=Y".
//
//	gobench -url https://127.0.0.1:8443 -token gbx_... -ca tls/cert.pem -n 200
package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor/client"
)

func main() {
	url := flag.String("url", "", "the executor's URL")
	token := flag.String("token", "", "the tenant's token")
	ca := flag.String("ca", "", "the executor's certificate (PEM)")
	n := flag.Int("n", 200, "evals to time (after 20 warm-up evals)")
	flag.Parse()
	ctx := context.Background()
	pem, err := os.ReadFile(*ca)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c, err := client.Dial(ctx, client.Config{URL: *url, Token: *token, RootCAs: pool})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var ts glovebox.Toolset
	if err := ts.Func("add", func(x, y int) int { return x + y }); err != nil {
		log.Fatal(err)
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	ev := c.Evaluator(rt)
	times := make([]float64, 0, *n)
	for i := 0; i < *n+20; i++ {
		t0 := time.Now()
		res, err := ev.Eval(ctx, "add(20, 22)")
		if err != nil {
			log.Fatal(err)
		}
		if res.Value != int64(42) {
			log.Fatalf("value %v (%s)", res.Value, res.Status)
		}
		if i >= 20 {
			times = append(times, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	slices.Sort(times)
	sum := 0.0
	for _, t := range times {
		sum += t
	}
	fmt.Printf("go n=%d p50_ms=%.2f mean_ms=%.2f\n", len(times), times[len(times)/2], sum/float64(len(times)))
}
