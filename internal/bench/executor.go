package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// Executor load test bounds: each figure is at most execLoadN requests or
// execLoadMax of wall time, whichever ends first, so the rows take well
// under a minute on 2 cores.
const (
	execLoadN   = 200
	execLoadMax = 4 * time.Second
)

// loadStat is one load figure: completed requests per second and their
// latency.
type loadStat struct {
	perSec float64
	lat    stat
}

// load runs f from conc goroutines until n calls or max elapsed.
func load(conc, n int, max time.Duration, f func(i int) error) (loadStat, error) {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		next atomic.Int64
		fail atomic.Pointer[error]
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > n || time.Since(start) > max || fail.Load() != nil {
					return
				}
				t0 := time.Now()
				if err := f(i); err != nil {
					fail.CompareAndSwap(nil, &err)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if e := fail.Load(); e != nil {
		return loadStat{}, *e
	}
	el := time.Since(start)
	return loadStat{perSec: float64(len(lat)) / el.Seconds(), lat: summarize(lat)}, nil
}

func (l loadStat) String() string {
	return fmt.Sprintf("%.0f/s (p50 %s, p99 %s)", l.perSec, ms(l.lat.p50), ms(l.lat.p99))
}

// execServer is an executor served in this process over TLS on a
// loopback port, with its client.
type execServer struct {
	srv  *executor.Server
	hs   *http.Server
	c    *client.Client
	done func()
}

func startExecServer(ctx context.Context, dir string, workers int, b box.Box) (*execServer, error) {
	return startExecServerWith(ctx, dir, workers, b, "", nil)
}

// startExecServerWith is startExecServer with the store at storeURL (a
// PostgreSQL URL; "": an SQLite file in dir) and the tenant's token tok
// ("": a new one), and the eval config changed by mod (nil: none).
func startExecServerWith(ctx context.Context, dir string, workers int, b box.Box, storeURL string, mod func(*executor.EvalConfig), tok ...string) (*execServer, error) {
	var sum string
	var err error
	if len(tok) == 0 {
		tok = []string{""}
		if tok[0], sum, err = executor.MintToken(); err != nil {
			return nil, err
		}
	} else {
		sum = executor.HashToken(tok[0])
	}
	cfg := executor.Config{Backend: b, StorePath: filepath.Join(dir, "store-"+strconv.Itoa(workers)+".db"),
		MaxRuns: workers, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tenants: []executor.Tenant{{Name: "bench", TokenSHA256: sum, MaxConcurrentRuns: workers, MaxQueuedRuns: 64}}}
	if storeURL != "" {
		cfg.StorePath, cfg.StoreURL = "", storeURL
	}
	srv, err := executor.New(cfg)
	if err != nil {
		return nil, err
	}
	ecfg := executor.EvalConfig{PoolSize: workers}
	if mod != nil {
		mod(&ecfg)
	}
	if err := srv.EnableEvals(ctx, ecfg); err != nil {
		srv.Close()
		return nil, err
	}
	certPEM, keyPEM, err := executor.DevCert(nil, time.Hour)
	if err != nil {
		srv.Close()
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		srv.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, err
	}
	hs := &http.Server{Handler: srv.Handler(), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog: slog.NewLogLogger(slog.New(slog.NewTextHandler(io.Discard, nil)).Handler(), slog.LevelError)}
	go hs.ServeTLS(ln, "", "")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	c, err := client.Dial(ctx, client.Config{URL: "https://" + ln.Addr().String(), Token: tok[0], RootCAs: pool})
	if err != nil {
		hs.Close()
		srv.Close()
		return nil, err
	}
	return &execServer{srv: srv, hs: hs, c: c, done: func() { hs.Close(); srv.Close() }}, nil
}

// Executor adds the executor's rows: runs/s and evals/s through an
// executor on loopback (TLS, HTTP/2, the SQLite store, the real client)
// with 1 and 2 workers (its MaxRuns, and as many VMs in the eval pool),
// each beside the same work done in-process in the same run; clients
// send from twice as many goroutines as there are workers, so the
// executor is never idle. Runs use bwrap (`true`); evals are `1+1` and a
// program making one tool call that comes back to the client.
func Executor(ctx context.Context, row Row) {
	dir, err := os.MkdirTemp("", "glovebox-bench-executor")
	if err != nil {
		row("-", "executor rows", "skipped", err.Error(), "-", "-")
		return
	}
	defer os.RemoveAll(dir)
	var tools glovebox.Toolset
	tools.Func("add", func(a, b int) int { return a + b })
	for _, workers := range []int{1, 2} {
		conc := 2 * workers
		b, berr := bwrap.New(bwrap.Config{})
		var x *execServer
		if berr == nil {
			x, err = startExecServer(ctx, dir, workers, b)
		}
		if berr != nil || err != nil {
			row("-", fmt.Sprintf("executor, %d worker(s)", workers), "not available", fmt.Sprint(berr, err), "-", "-")
			return
		}
		rt, err := glovebox.New(ctx, glovebox.Config{Tools: &tools, PoolSize: workers})
		if err != nil {
			x.done()
			row("-", "executor rows", "skipped", err.Error(), "-", "-")
			return
		}
		var seq atomic.Int64
		runRemote := func(int) error {
			res, err := x.c.Run(ctx, remote.Request{Command: box.Command{Argv: []string{"true"}},
				IdempotencyKey: fmt.Sprintf("bench-%d-%d-%d", workers, time.Now().UnixNano(), seq.Add(1))})
			if err == nil && !res.OK() {
				err = fmt.Errorf("run exit %d: %s", res.ExitStatus, res.Stderr)
			}
			return err
		}
		runLocal := func(int) error {
			res, err := b.Run(ctx, box.Command{Argv: []string{"true"}})
			if err == nil && !res.OK() {
				err = fmt.Errorf("run exit %d: %s", res.ExitStatus, res.Stderr)
			}
			return err
		}
		ev := x.c.Evaluator(rt)
		evalWith := func(e interface {
			Eval(context.Context, string) (*glovebox.Result, error)
		}, code string) func(int) error {
			return func(int) error {
				res, err := e.Eval(ctx, code)
				if err == nil && res.Status != glovebox.StatusOK {
					err = fmt.Errorf("%q: %s %+v", code, res.Status, res.Error)
				}
				return err
			}
		}
		cases := []struct {
			what          string
			remote, local func(int) error
		}{
			{"runs/s (bwrap `true`)", runRemote, runLocal},
			{"evals/s (`1+1`)", evalWith(ev, "1+1"), evalWith(rt, "1+1")},
			{"evals/s (one tool call back)", evalWith(ev, "add(1, 2)"), evalWith(rt, "add(1, 2)")},
		}
		for _, c := range cases {
			c.remote(0) // warm: pools, connections
			r, err := load(conc, execLoadN, execLoadMax, c.remote)
			if err != nil {
				row("-", fmt.Sprintf("executor %s, %d worker(s)", c.what, workers), "failed", err.Error(), "-", "-")
				continue
			}
			l, err := load(conc, execLoadN, execLoadMax, c.local)
			if err != nil {
				row("-", fmt.Sprintf("executor %s, %d worker(s)", c.what, workers), r.String(), "in-process failed: "+err.Error(), "-", "-")
				continue
			}
			row("-", fmt.Sprintf("executor %s, %d worker(s), %d clients", c.what, workers, conc), r.String(), "in-process "+l.String(),
				fmt.Sprintf("%.2f×", r.perSec/l.perSec), "-")
		}
		rt.Close()
		x.done()
	}
}
