// Command gobench is the Go half of the gem's benchmark
// (ruby/bench/bench.rb): n evals of `add(20, 22)`, one tool call each
// answered by this process, through an executor with glovebox's Go
// client, or with -inprocess in this process's own Runtime (the
// library, no executor). It prints one line: "go n=N p50_ms=X
// mean_ms=Y"; with -workers, W goroutines evaluate for -seconds and it
// prints "go workers=W evals_per_s=X".
//
//	gobench -url https://127.0.0.1:8443 -token gbx_... -ca tls/cert.pem -n 200
//	gobench -inprocess -n 200
//	gobench -inprocess -workers 2 -seconds 3
package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor/client"
)

func main() {
	url := flag.String("url", "", "the executor's URL")
	token := flag.String("token", "", "the tenant's token")
	ca := flag.String("ca", "", "the executor's certificate (PEM)")
	n := flag.Int("n", 200, "evals to time (after 20 warm-up evals)")
	inProcess := flag.Bool("inprocess", false, "run the evals in this process's Runtime instead of through an executor")
	workers := flag.Int("workers", 0, "with -inprocess: goroutines evaluating at once for -seconds (throughput)")
	seconds := flag.Float64("seconds", 3, "with -workers: how long to run")
	flag.Parse()
	ctx := context.Background()
	var ts glovebox.Toolset
	if err := ts.Func("add", func(x, y int) int { return x + y }); err != nil {
		log.Fatal(err)
	}
	if *inProcess {
		rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
		if err != nil {
			log.Fatal(err)
		}
		defer rt.Close()
		if *workers > 0 {
			throughput(*workers, time.Duration(*seconds*float64(time.Second)), func() (*glovebox.Result, error) { return rt.Eval(ctx, "add(20, 22)") })
			return
		}
		report(*n, func() (*glovebox.Result, error) { return rt.Eval(ctx, "add(20, 22)") })
		return
	}
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
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	ev := c.Evaluator(rt)
	report(*n, func() (*glovebox.Result, error) { return ev.Eval(ctx, "add(20, 22)") })
}

// report times n evals (after 20 not timed) and prints the line.
func report(n int, eval func() (*glovebox.Result, error)) {
	times := make([]float64, 0, n)
	for i := 0; i < n+20; i++ {
		t0 := time.Now()
		res, err := eval()
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

// throughput runs eval on w goroutines for d (after one eval each not
// counted) and prints the evals per second.
func throughput(w int, d time.Duration, eval func() (*glovebox.Result, error)) {
	var done atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	var stop atomic.Bool
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := eval(); err != nil {
				log.Fatal(err)
			}
			<-start
			for !stop.Load() {
				res, err := eval()
				if err != nil || res.Value != int64(42) {
					log.Fatalf("eval: %v %v", err, res)
				}
				done.Add(1)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // every worker past its first eval
	t0 := time.Now()
	close(start)
	time.Sleep(d)
	stop.Store(true)
	n := done.Load()
	el := time.Since(t0)
	wg.Wait()
	fmt.Printf("go workers=%d evals_per_s=%.0f\n", w, float64(n)/el.Seconds())
}
