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
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
	"github.com/gloveboxhq/glovebox/internal/benchhook"
)

// Executor load test bounds: each figure is at most execLoadN requests or
// execLoadMax of wall time, whichever ends first, so the rows take about
// a minute on 2 cores. 1000: an in-process figure of 200 evals lasted
// 20 ms, mostly its goroutines starting, and a p99 of 200 is their
// second slowest.
const (
	execLoadN   = 1000
	execLoadMax = 4 * time.Second
)

// loadStat is one load figure: completed requests per second, their
// latency, and the processor time this process (and extra, when load
// was given one) spent per request.
type loadStat struct {
	perSec float64
	lat    stat
	cpu    time.Duration
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
	start, cpu0 := time.Now(), cpuTime()
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
	el, cpu := time.Since(start), cpuTime()-cpu0
	if len(lat) > 0 {
		cpu /= time.Duration(len(lat))
	}
	return loadStat{perSec: float64(len(lat)) / el.Seconds(), lat: summarize(lat), cpu: cpu}, nil
}

func (l loadStat) String() string {
	return fmt.Sprintf("%.0f/s (p50 %s, p99 %s, CPU %s each)", l.perSec, ms(l.lat.p50), ms(l.lat.p99), ms(l.cpu))
}

// execServer is an executor served in this process over TLS on a
// loopback port, with its client.
type execServer struct {
	srv  *executor.Server
	hs   *http.Server
	c    *client.Client
	url  string // https://127.0.0.1:PORT
	cert []byte // its certificate, PEM
	done func()
}

// startExecServer starts an executor with workers slots (and as many
// VMs in its eval pool) on a SQLite store in dir, or, with storeURL, on
// that PostgreSQL store.
func startExecServer(ctx context.Context, dir string, workers int, b box.Box, storeURL string) (*execServer, error) {
	return startExecServerWith(ctx, dir, workers, b, storeURL, nil)
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
	return &execServer{srv: srv, hs: hs, c: c, url: "https://" + ln.Addr().String(), cert: certPEM, done: func() { hs.Close(); srv.Close() }}, nil
}

// Executor adds the executor's rows: runs/s and evals/s through an
// executor on loopback (TLS, HTTP/2, the SQLite store, the real client)
// with 1, 2 and 4 workers (its MaxRuns, and as many VMs in the eval
// pool), each beside the same work done in-process in the same run;
// clients send from twice as many goroutines as there are workers, so the
// executor is never idle. Runs use bwrap (`true`); evals are `1+1` and a
// program making one tool call that comes back to the client. Then the
// PostgreSQL rows (executorPostgres). Each figure gives the processor
// time this process spent per request (clients, executor and in-process
// work alike).
func Executor(ctx context.Context, row Row) {
	dir, err := os.MkdirTemp("", "glovebox-bench-executor")
	if err != nil {
		row("-", "executor rows", "skipped", err.Error(), "-", "-")
		return
	}
	defer os.RemoveAll(dir)
	var tools glovebox.Toolset
	tools.Func("add", func(a, b int) int { return a + b })
	evalsPerSec := map[int]float64{} // `1+1` through the executor, by workers
	var floors *execFloors           // measured beside the 2-worker `1+1` row
	for _, workers := range []int{1, 2, 4} {
		conc := 2 * workers
		b, berr := bwrap.New(bwrap.Config{})
		var x *execServer
		if berr == nil {
			x, err = startExecServer(ctx, dir, workers, b, "")
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
		cases := []struct {
			what          string
			remote, local func(int) error
		}{
			{"runs/s (bwrap `true`)", runRemote, runLocal},
			{"evals/s (`1+1`)", evalWith(ctx, ev, "1+1"), evalWith(ctx, rt, "1+1")},
			{"evals/s (one tool call back)", evalWith(ctx, ev, "add(1, 2)"), evalWith(ctx, rt, "add(1, 2)")},
		}
		for _, c := range cases {
			name := fmt.Sprintf("executor %s, %d worker(s)", c.what, workers)
			r, l, ok := measurePair(row, name, conc, c.remote, c.local)
			if !ok {
				continue
			}
			met, target := "-", "-"
			if c.what == "evals/s (`1+1`)" {
				evalsPerSec[workers] = r.perSec
				if workers == 2 { // its parts, measured now, printed after it
					floors = measureFloors(ctx, dir, "", conc)
				}
				met, target = evalTarget(workers, r, l, evalsPerSec, floors)
			}
			// The ratio closes the result too, so the progress line
			// ("measured: NAME: RESULT") ends with it.
			ratio := fmt.Sprintf("%.2f×", r.perSec/l.perSec)
			row(met, fmt.Sprintf("%s, %d clients", name, conc), r.String()+" ("+ratio+")", "in-process "+l.String(),
				ratio, target)
			if c.what == "evals/s (`1+1`)" && workers == 2 {
				floors.print(row, "", conc, r, l) // the next rows: its parts, and what it spends beyond them
			}
		}
		rt.Close()
		x.done()
	}
	executorPostgres(ctx, row, &tools, floors)
}

// evalWith is one eval of code by e, failing unless it ends ok.
func evalWith(ctx context.Context, e interface {
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

// measurePair loads remote, then local, from conc goroutines (after one
// warming call of remote: pools, connections); a failure is reported as
// name's row, and ok is false.
func measurePair(row Row, name string, conc int, remote, local func(int) error) (r, l loadStat, ok bool) {
	remote(0)
	r, err := load(conc, execLoadN, execLoadMax, remote)
	if err != nil {
		row("-", name, "failed", err.Error(), "-", "-")
		return r, l, false
	}
	l, err = load(conc, execLoadN, execLoadMax, local)
	if err != nil {
		row("-", name, r.String(), "in-process failed: "+err.Error(), "-", "-")
		return r, l, false
	}
	return r, l, true
}

// evalTarget judges a `1+1` row against issue 36's figures: from 2
// workers on, never fewer evals/s than with fewer workers; at 2, also
// p99 at most 10 ms and the processor time per eval at most 1.25 × its
// parts measured beside it (f: the in-process eval, a bare round trip,
// the store's writes).
func evalTarget(workers int, r, l loadStat, byWorkers map[int]float64, f *execFloors) (met, target string) {
	if workers < 2 {
		return "-", "-"
	}
	ok := true
	for w, ps := range byWorkers {
		if w < workers && r.perSec < ps {
			ok = false
		}
	}
	if workers > 2 || f == nil || f.err != nil {
		return yes(ok), "≥ fewer workers'"
	}
	ok = ok && r.lat.p99 <= 10*time.Millisecond && float64(r.cpu) <= maxOwnCost*float64(l.cpu+f.trip.cpu+f.store.cpu)
	return yes(ok), fmt.Sprintf("CPU ≤ %.2f× its parts, p99 ≤ 10 ms, ≥ fewer workers'", maxOwnCost)
}

// maxOwnCost is issue 36's bound on an eval through the executor: its
// processor time at most this many times the sum of its parts.
const maxOwnCost = 1.25

// execFloors are the parts of an eval through the executor, each
// measured alone from as many clients as its row: a bare HTTP/2 round
// trip over TLS (trip), and the store's writes of one eval (store; on
// PostgreSQL, storePG is the server's processor time per eval for
// them).
type execFloors struct {
	trip, store loadStat
	storePG     time.Duration
	err         error
}

// tripWhat and storeWhat name the floor rows. perf4 reads the
// processor time of each: the round trip's row starts "executor floor:",
// the store's holds "durable write".
const (
	tripWhat  = "executor floor: a bare HTTP/2+TLS round trip on loopback (no store, no eval)"
	storeWhat = "executor store floor: the store's durable write per eval (the key recorded running, waited for on disk, and its final record, not waited for)"
)

// measureFloors measures the round trip (once, on SQLite's turn: it is
// the same for both stores; trip is then the caller's) and the store's
// writes: an SQLite file in dir, or the PostgreSQL database at url
// (pgCPU then reads its server's processor time).
func measureFloors(ctx context.Context, dir, url string, conc int, pg ...interface{ CPU() int64 }) *execFloors {
	f := &execFloors{}
	if url == "" {
		if f.trip, f.err = transportFloor(conc); f.err != nil {
			return f
		}
	}
	if benchhook.StoreWrites == nil {
		f.err = fmt.Errorf("the executor's store writes are not hooked")
		return f
	}
	write, closeStore, err := benchhook.StoreWrites(ctx, filepath.Join(dir, "floor.db"), url)
	if err != nil {
		f.err = err
		return f
	}
	defer closeStore()
	if err := write(0); err != nil {
		f.err = err
		return f
	}
	var c0 int64
	if len(pg) > 0 {
		c0 = pg[0].CPU()
	}
	f.store, f.err = load(conc, execLoadN, execLoadMax, write)
	if len(pg) > 0 && f.err == nil {
		f.storePG = time.Duration(pg[0].CPU()-c0) * 10 * time.Millisecond / time.Duration(max(f.store.lat.n, 1))
	}
	return f
}

// print adds the floor rows after the 2-worker `1+1` row (r through the
// executor, l in-process; where says which store, "" for SQLite): the
// round trip (SQLite's turn only) and the store's writes, each beside
// the in-process eval, then what the executor spends beyond the sum of
// the three, the figure issue 36 bounds.
func (f *execFloors) print(row Row, where string, conc int, r, l loadStat, pgCPU ...time.Duration) {
	if f == nil || f.err != nil {
		row("-", where+storeWhat, "failed", fmt.Sprint(f.err), "-", "-")
		return
	}
	if where == "" {
		row("-", fmt.Sprintf("%s, %d clients", tripWhat, conc), f.trip.String(), "in-process `1+1` eval: CPU "+ms(l.cpu)+" each",
			fmt.Sprintf("%.2f×", float64(f.trip.cpu)/float64(l.cpu)), "-")
	}
	store := f.store.String()
	if f.storePG > 0 {
		store = fmt.Sprintf("%s, PostgreSQL CPU %s each", store, ms(f.storePG))
	}
	row("-", fmt.Sprintf("%s%s, %d clients", where, storeWhat, conc), store, "in-process `1+1` eval: CPU "+ms(l.cpu)+" each",
		fmt.Sprintf("%.2f×", float64(f.store.cpu)/float64(l.cpu)), "-")
	exec := r.cpu
	parts := l.cpu + f.trip.cpu + f.store.cpu + f.storePG
	if len(pgCPU) > 0 { // the database's share of the eval through the executor
		exec += pgCPU[0]
	}
	ratio := float64(exec) / float64(parts)
	row(yes(ratio <= maxOwnCost), fmt.Sprintf("%sexecutor's own cost, `1+1`, 2 worker(s): CPU per eval beyond its parts", where),
		fmt.Sprintf("CPU %s each, %s more than its parts", ms(exec), ms(exec-parts)),
		fmt.Sprintf("parts: in-process eval %s + round trip %s + store %s = %s", ms(l.cpu), ms(f.trip.cpu), ms(f.store.cpu+f.storePG), ms(parts)),
		fmt.Sprintf("%.2f×", ratio), fmt.Sprintf("≤ %.2f×", maxOwnCost))
}

// transportFloor measures a bare HTTP/2 round trip over TLS on loopback
// (Go's net/http server and client, as the executor and its client use
// them; no authentication, store, job or eval), its request and answer
// the size of a `1+1` eval's, from conc goroutines: the transport's
// share of an eval through the executor.
func transportFloor(conc int) (loadStat, error) {
	answer := `{"type":"accepted","key":"e-0123456789abcdef0123456789abcdef","state":"running"}` + "\n" +
		`{"type":"result","record":{"key":"e-0123456789abcdef0123456789abcdef","state":"completed","eval":{"status":"ok","value":"2","stdout":"","stderr":"","duration_ms":0.1}}}` + "\n"
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, answer)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = slog.NewLogLogger(slog.New(slog.NewTextHandler(io.Discard, nil)).Handler(), slog.LevelError)
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	defer c.CloseIdleConnections()
	body := `{"code":"1+1","idempotency_key":"e-0123456789abcdef0123456789abcdef","limits":{}}`
	trip := func(int) error {
		req, err := http.NewRequest("POST", srv.URL+"/v1/evals", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer gbx_0123456789abcdef0123456789abcdef")
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.ProtoMajor != 2 {
			return fmt.Errorf("the round trip went over %s, not HTTP/2", resp.Proto)
		}
		return nil
	}
	if err := trip(0); err != nil { // warm: the connection
		return loadStat{}, err
	}
	return load(conc, 4*execLoadN, execLoadMax, trip)
}
