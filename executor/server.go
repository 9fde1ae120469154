package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// Config is an executor's set-up. Backend, StorePath or StoreURL, and at
// least one Tenant are required; other zero fields take the defaults beside them.
type Config struct {
	// Backend runs the commands (a *bwrap.Box or *gvisor.Box).
	Backend box.Box
	// StorePath is the SQLite file of the idempotency store; it is made
	// when missing. Runs in progress when a previous process on it died
	// are marked lost when New opens it.
	StorePath string
	// StoreURL, when set (instead of StorePath), is a PostgreSQL
	// connection URL (postgres://user:password@host:port/db?sslmode=…,
	// or with host=/dir for a Unix socket): the store of a fleet of
	// executors sharing one database. Its tables are made on first use.
	// Every executor on it heartbeats; runs of an executor not seen for
	// 30 s are marked lost by the others (never run again), those of
	// live peers are left alone. MinStoreFree is not checked (the disk
	// is the database's). Errors from New: not a postgres:// or
	// postgresql:// URL, the database cannot be reached.
	StoreURL string
	// Tenants are the callers and their limits.
	Tenants []Tenant
	// MaxRuns bounds the jobs executing at once across all tenants;
	// zero means DefaultMaxRuns.
	MaxRuns int
	// MaxOutput caps a command's Limits.Output (bytes of stdout and of
	// stderr each); zero means DefaultMaxOutput.
	MaxOutput int
	// MaxTimeout caps a command's Timeout; zero means DefaultMaxTimeout.
	MaxTimeout time.Duration
	// MaxMemory (bytes), MaxPids, MaxDisk (bytes of /tmp, a tmpfs, so
	// memory too) and MaxOutputFiles (bytes) cap a command's Limits
	// fields of those names: a larger or zero request is lowered to the
	// cap, so one tenant cannot ask for the host's memory. Zero means
	// box's defaults (box.DefaultMemory 512 MiB, DefaultPids 128,
	// DefaultDisk 256 MiB, DefaultOutputFiles 4 MiB).
	MaxMemory, MaxDisk, MaxOutputFiles int64
	MaxPids                            int
	// MinStoreFree is the bytes the store's file system must keep free:
	// with less, new jobs are refused store_full before they start and
	// /readyz is 503. Zero means DefaultMinStoreFree; negative: not
	// checked.
	MinStoreFree int64
	// Retention is how long a finished record is kept: a repeat of its
	// key within it gets the record; after it, the key is free and a
	// repeat runs anew. Zero means DefaultRetention.
	Retention time.Duration
	// Logger gets one line per request and per finished job (never a
	// body, a credential or a token); nil means slog.Default().
	Logger *slog.Logger

	// wrapStore, when set (by tests), wraps the store New opens before
	// anything uses it: a store swapped later races the purge loop.
	wrapStore func(store) store
}

// Server defaults: our choices for the 2-core machine this was measured on.
const (
	DefaultMaxRuns    = 8
	DefaultMaxOutput  = 4 << 20
	DefaultMaxTimeout = 10 * time.Minute
	DefaultRetention  = 24 * time.Hour // as long as a client may reasonably retry
)

// Server is an executor: an http.Handler serving the /v1 wire contract
// (EXECUTOR.md) over a backend box, with a durable idempotency store.
// Make it with [New]; serve [Server.Handler] over TLS; [Server.Close] it.
type Server struct {
	cfg     Config
	backend box.Box
	posture box.Posture
	tenants atomic.Pointer[[]*tenant] // swapped whole by SetTenants
	store   store
	space   *space
	m       *metrics
	log     *slog.Logger
	mux     *http.ServeMux
	slots   *fairSlots // MaxRuns, shared fairly (fair.go)
	// next holds 2×MaxRuns places for jobs recorded running that wait
	// for a slot (job.go, execute).
	next chan struct{}

	base     context.Context // jobs run under it, not under their request
	stop     context.CancelFunc
	draining atomic.Bool
	cut      atomic.Bool    // Drain's grace period ended: work stopped then is lost (drain.go)
	wg       sync.WaitGroup // jobs admitted and not finished
	bg       sync.WaitGroup // the purge loop and the evals' janitor

	evals *evals // nil until EnableEvals (eval.go)

	mu     sync.Mutex
	active map[string]*job // tenant "\x00" key → job not yet finished in the store

	paths map[string]bool // paths given a 405 fallback by Handle
}

// New opens the store (marking runs a dead process left lost), checks the
// configuration and returns a Server. Errors: a missing Backend or
// StorePath (or StoreURL), a bad tenant, a store that cannot be opened.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil || (cfg.StorePath == "") == (cfg.StoreURL == "") {
		return nil, errors.New("executor: Config needs a Backend and one of StorePath and StoreURL")
	}
	if cfg.StoreURL != "" && !isPostgresURL(cfg.StoreURL) {
		return nil, errors.New("executor: StoreURL must be a postgres:// or postgresql:// URL")
	}
	if len(cfg.Tenants) == 0 {
		return nil, errors.New("executor: no tenants configured")
	}
	ts, err := newTenants(cfg.Tenants, nil)
	if err != nil {
		return nil, err
	}
	if cfg.MaxRuns <= 0 {
		cfg.MaxRuns = DefaultMaxRuns
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxMemory <= 0 {
		cfg.MaxMemory = box.DefaultMemory
	}
	if cfg.MaxPids <= 0 {
		cfg.MaxPids = box.DefaultPids
	}
	if cfg.MaxDisk <= 0 {
		cfg.MaxDisk = box.DefaultDisk
	}
	if cfg.MaxOutputFiles <= 0 {
		cfg.MaxOutputFiles = box.DefaultOutputFiles
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinStoreFree == 0 {
		cfg.MinStoreFree = DefaultMinStoreFree
	}
	var st store
	where := cfg.StorePath
	if cfg.StoreURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err = openPgStore(ctx, cfg.StoreURL)
		cancel()
		cfg.MinStoreFree, where = -1, "postgresql"
	} else {
		st, err = openStore(cfg.StorePath)
	}
	if err != nil {
		return nil, err
	}
	if cfg.wrapStore != nil {
		st = cfg.wrapStore(st)
	}
	n, err := st.recover(context.Background(), time.Now())
	if err != nil {
		st.close()
		return nil, fmt.Errorf("executor: store %s: %w", where, err)
	}
	used, err := st.usage(context.Background())
	if err != nil {
		st.close()
		return nil, fmt.Errorf("executor: store %s: %w", where, err)
	}
	base, stop := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, backend: cfg.Backend, posture: cfg.Backend.Posture(), store: st, space: newSpace(cfg.StorePath, cfg.MinStoreFree, used),
		m: newMetrics(), log: cfg.Logger, mux: http.NewServeMux(), slots: newFairSlots(cfg.MaxRuns),
		next: make(chan struct{}, nextPlaces*cfg.MaxRuns), base: base, stop: stop, active: map[string]*job{}, paths: map[string]bool{},
	}
	s.tenants.Store(&ts)
	s.bg.Add(1)
	go s.purgeLoop()
	if cfg.StoreURL != "" {
		s.bg.Add(1)
		go s.recountLoop() // quota.go
	}
	if n > 0 {
		s.log.Warn("runs in progress when the executor stopped are marked lost", "count", n)
	}
	s.mux.HandleFunc("GET "+wire.PathHealth, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET "+wire.PathReady, s.ready)
	s.mux.Handle("GET "+wire.PathMetric, promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	s.Handle("GET "+wire.PathInfo, s.info)
	s.Handle("POST "+wire.PathRuns, s.postRun)
	s.Handle("GET "+wire.PathRuns+"/{key}", s.getRun)
	s.Handle("DELETE "+wire.PathRuns+"/{key}", s.cancelRun)
	s.Handle("GET "+wire.PathRuns+"/{key}/outputs/{path...}", s.getOutput)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.evals == nil && (pathUnder(r.URL.Path, wire.PathEvals) || pathUnder(r.URL.Path, wire.PathSessions) || pathUnder(r.URL.Path, wire.PathCodeMode)) {
			writeError(w, wire.Errorf(wire.CodeEvalsDisabled, "this executor does not run evals: start it with --evals (Server.EnableEvals)"))
			return
		}
		writeError(w, wire.Errorf(wire.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// pathUnder reports whether p is route or below it.
func pathUnder(p, route string) bool { return p == route || strings.HasPrefix(p, route+"/") }

// SetTenants replaces the tenants (a token rotated, a tenant added or
// removed, limits changed) without a restart: requests authenticate
// against the new list from the next one on. A tenant keeps its runs and
// records (they are by name); one whose limits are unchanged keeps its
// counters, and one whose limits changed starts new counters, with runs
// admitted before still running. An error (a bad entry, no tenants)
// changes nothing.
func (s *Server) SetTenants(ts []Tenant) error {
	if len(ts) == 0 {
		return errors.New("executor: no tenants configured")
	}
	nts, err := newTenants(ts, *s.tenants.Load())
	if err != nil {
		return err
	}
	s.tenants.Store(&nts)
	return nil
}

// HandlerFunc is an authenticated route's handler: t is the caller's
// tenant (its name is t.Name; its limits already applied to the body).
type HandlerFunc func(w http.ResponseWriter, r *http.Request, t *Tenant)

// Handle registers an authenticated route (a net/http ServeMux pattern
// such as "POST /v1/evals"): the bearer token is checked and the body
// capped at the tenant's MaxRequestBytes before h runs. This is how evals
// and other extensions add routes; call it before serving.
func (s *Server) Handle(pattern string, h HandlerFunc) {
	if method, path, ok := strings.Cut(pattern, " "); ok && !s.paths[path] {
		// The same path with another method: a 405 in the documented shape
		// (the ServeMux's own would be plain text).
		s.paths[path] = true
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			s.refuse(w, r, wire.Errorf(wire.CodeMethodNotAllowed, "%s %s: method not allowed (want %s)", r.Method, r.URL.Path, method))
		})
	}
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		t := authenticate(*s.tenants.Load(), r)
		if t == nil {
			s.refuse(w, r, wire.Errorf(wire.CodeUnauthenticated, "a valid bearer token is required"))
			return
		}
		if r.ContentLength > t.MaxRequestBytes {
			// Refused before a byte of the body is read, so a client that
			// sent Expect: 100-continue learns it before sending the body
			// (net/http answers 100 Continue at the first read): one that
			// sent a large body at once has the connection closed under
			// its write and cannot read the answer.
			s.refuse(w, r, wire.Errorf(wire.CodeRequestTooLarge, "request body of %d bytes, over %d", r.ContentLength, t.MaxRequestBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, t.MaxRequestBytes)
		r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, t))
		h(w, r, &t.Tenant)
	})
}

type tenantKey struct{}

func tenantOf(r *http.Request) *tenant { t, _ := r.Context().Value(tenantKey{}).(*tenant); return t }

// Handler is the executor's http.Handler.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		s.mux.ServeHTTP(w, r)
	})
}

// Close cancels running jobs, waits for their records and closes the
// store.
func (s *Server) Close() error {
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
	s.bg.Wait()
	return s.store.close()
}

// purgeLoop deletes records older than the retention, at start and then
// every tenth of it (at least every second, at most every hour).
func (s *Server) purgeLoop() {
	defer s.bg.Done()
	every := max(min(s.cfg.Retention/10, time.Hour), time.Second)
	for {
		n, err := s.store.purge(s.base, time.Now().Add(-s.cfg.Retention))
		s.space.wrote(err)
		if err != nil {
			s.log.Error("purging old records failed", "err", err)
		} else if n > 0 {
			s.log.Info("purged old records", "count", n)
			if err := s.space.recount(s.base, s.store); err != nil {
				s.log.Error("counting stored bytes failed", "err", err)
			}
		}
		select {
		case <-s.base.Done():
			return
		case <-time.After(every):
		}
	}
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if s.draining.Load() {
		writeError(w, wire.Errorf(wire.CodeUnavailable, "draining"))
		return
	}
	if err := s.store.ping(ctx); err != nil {
		writeError(w, wire.Errorf(wire.CodeUnavailable, "store: %v", err))
		return
	}
	if e := s.space.diskShort(true); e != nil {
		writeError(w, wire.Errorf(wire.CodeUnavailable, "%s", e.Message))
		return
	}
	// After a failed write, ready again only once a write succeeds: try
	// one (a small one; the disk check above covers large records).
	if msg := s.space.failed.Load(); msg != nil {
		err := s.store.probe(ctx)
		s.space.wrote(err)
		if err != nil {
			writeError(w, wire.Errorf(wire.CodeUnavailable, "store: the last write failed (%s), and a probe write too: %v", *msg, err))
			return
		}
	}
	io.WriteString(w, "ready\n")
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, t *Tenant) {
	writeJSON(w, wire.Info{Version: "v1", Backend: s.posture.Backend, Isolation: string(s.posture.Isolation), Tenant: t.Name})
}

// refuse answers with e and counts it.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, e *wire.Error) {
	s.m.refused.WithLabelValues(string(e.Code)).Inc()
	tenant := ""
	if t := tenantOf(r); t != nil {
		tenant = t.Name
	}
	s.log.Info("refused", "method", r.Method, "path", logPath(r.URL.Path), "tenant", tenant, "code", e.Code)
	writeError(w, e)
}

// maxLogPath is the most of a request's path a log line holds: routes
// and keys fit well within it, and a peer sending megabyte paths (no
// token needed to be refused) cannot have each copied into the log.
const maxLogPath = 256

func logPath(p string) string {
	if len(p) <= maxLogPath {
		return p
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(p[:maxLogPath], ""), len(p))
}

// bodyTimeout is how long a request body may take to arrive (a client
// trickling bytes holds a connection, not a run).
const bodyTimeout = 30 * time.Second

// readBody reads the capped body within bodyTimeout; a body over the
// tenant's limit is request_too_large.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *wire.Error) {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	if r.ProtoMajor < 2 {
		// HTTP/1's deadline is the connection's: cleared for the answer.
		// HTTP/2's is the stream's, and bounds only the body, read whole
		// here (clearing it costs a message to the connection's loop).
		defer rc.SetReadDeadline(time.Time{})
	}
	b, err := io.ReadAll(r.Body)
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, wire.Errorf(wire.CodeRequestTooLarge, "request body over %d bytes", mb.Limit)
	}
	if err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "reading the body: %v", err)
	}
	return b, nil
}

func (s *Server) postRun(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	t := tenantOf(r)
	body, werr := readBody(w, r)
	if werr != nil {
		s.refuse(w, r, werr)
		return
	}
	req, err := wire.DecodeRunRequest(body)
	if err != nil {
		s.refuse(w, r, err.(*wire.Error))
		return
	}
	if req.ExpiresAt != nil && time.Now().After(*req.ExpiresAt) {
		s.refuse(w, r, wire.Errorf(wire.CodeExpired, "the request expired at %s", req.ExpiresAt.UTC().Format(time.RFC3339Nano)))
		return
	}
	key := req.IdempotencyKey
	if key == "" {
		key = wire.NewKey("r-") // no key given: a run of its own
	}
	c := req.Command.Box()
	s.capLimits(&c)
	creds := req.Credentials
	s.serveJob(w, r, t, jobSpec{
		kind: "run", key: key, hash: wire.Hash(&req.Command), expires: req.ExpiresAt,
		// stdout and stderr in the record and its result, outputs files,
		// all in base64, and room for the rest.
		maxRecord: (2*int64(c.Limits.Output)+c.Limits.OutputFiles)*4/3 + minReserve,
		work:      func(ctx context.Context, j *job) *wire.Record { return s.runCommand(ctx, j, c, creds) },
	})
}

// runCommand runs c (its limits capped) on the backend, streaming its
// output into j.
func (s *Server) runCommand(ctx context.Context, j *job, c box.Command, creds map[string]string) *wire.Record {
	if len(creds) > 0 {
		c.Credentials = map[string]func(context.Context) (string, error){}
		for k, v := range creds {
			c.Credentials[k] = func(context.Context) (string, error) { return v, nil }
		}
	}
	c.Stream = func(stream int, p []byte) {
		typ := wire.EventStdout
		if stream == 2 {
			typ = wire.EventStderr
		}
		j.output(typ, p)
	}
	res, err := s.backend.Run(ctx, c)
	rec := &wire.Record{}
	if err != nil {
		code := wire.CodeBackend
		switch {
		case errors.Is(err, box.ErrInvalidCommand):
			code = wire.CodeInvalidCommand
		case errors.Is(err, box.ErrUnsupported):
			code = wire.CodeUnsupported
		}
		rec.State, rec.Error = wire.StateFailed, wire.Errorf(code, "%v", err)
		return rec
	}
	rec.State = wire.StateCompleted
	rec.Result = clientwire.FromBoxResult(res, s.posture.Isolation)
	return rec
}

// capLimits lowers c's limits to the executor's caps. Output and Timeout:
// zero takes box's default (1 MiB, 30 s) or the cap if lower, a request
// over the cap gets the cap (not the default). Memory, Pids, Disk and
// OutputFiles: zero or over the cap gets the cap.
func (s *Server) capLimits(c *box.Command) {
	pick := func(v, def, cap int64) int64 {
		switch {
		case v <= 0:
			return min(def, cap)
		case v > cap:
			return cap
		}
		return v
	}
	l := &c.Limits
	l.Output = int(pick(int64(l.Output), box.DefaultOutput, int64(s.cfg.MaxOutput)))
	c.Timeout = time.Duration(pick(int64(c.Timeout), int64(box.DefaultTimeout), int64(s.cfg.MaxTimeout)))
	l.Memory = pick(l.Memory, s.cfg.MaxMemory, s.cfg.MaxMemory)
	l.Disk = pick(l.Disk, s.cfg.MaxDisk, s.cfg.MaxDisk)
	l.OutputFiles = pick(l.OutputFiles, s.cfg.MaxOutputFiles, s.cfg.MaxOutputFiles)
	l.Pids = int(pick(int64(l.Pids), int64(s.cfg.MaxPids), int64(s.cfg.MaxPids)))
}

// cancelRun cancels the caller's unfinished run under {key}: a queued one
// ends failed/canceled without running, a running one is killed (its
// result says canceled, exit 137). It answers the final record once there
// is one; a finished run's record as it is.
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, t *Tenant) {
	key := r.PathValue("key")
	if j := s.liveJob(t.Name, key); j != nil {
		<-j.ready
		j.cancel()
		select {
		case <-j.done:
		case <-r.Context().Done():
			return
		}
	} else if s.cfg.StoreURL != "" {
		// A shared store: a record not final here may be a job another
		// executor of the fleet runs, which this one cannot stop.
		// Answering its record (200, running) would read as a cancel
		// that never happened.
		rec, e := s.lookup(r)
		if e == nil && !wire.Final(rec.State) && s.liveJob(t.Name, key) == nil {
			s.refuse(w, r, wire.Errorf(wire.CodeUnavailable, "the job with key %s is %s on another executor of the fleet, which alone can cancel it: it was not canceled; send the DELETE again (it may reach that executor), or wait for its outcome", key, rec.State))
			return
		}
	}
	s.getRun(w, r, t)
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	rec, e := s.lookup(r)
	if e != nil {
		s.refuse(w, r, e)
		return
	}
	writeJSON(w, rec)
}

// getOutput serves one file of a completed run's outputs directory.
func (s *Server) getOutput(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	rec, e := s.lookup(r)
	if e != nil {
		s.refuse(w, r, e)
		return
	}
	var data []byte
	ok := false
	if rec.Result != nil {
		data, ok = rec.Result.Outputs[r.PathValue("path")]
	}
	if !ok {
		s.refuse(w, r, wire.Errorf(wire.CodeNotFound, "no output file %q in run %s", r.PathValue("path"), rec.Key))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	writeDeadline(w)
	w.Write(data)
}

// lookup finds the caller's record for the {key} path value: the live
// job's state, else the stored record. Another tenant's key is not_found,
// the same answer as a key never used.
func (s *Server) lookup(r *http.Request) (*wire.Record, *wire.Error) {
	t := tenantOf(r)
	key := r.PathValue("key")
	if !wire.ValidKey(key) {
		return nil, wire.Errorf(wire.CodeBadRequest, "malformed idempotency key")
	}
	e, err := s.store.get(r.Context(), t.Name, key)
	if errors.Is(err, errNoEntry) {
		return nil, wire.Errorf(wire.CodeNotFound, "no run with key %s", key)
	}
	if err != nil {
		return nil, storeRefusal(err, "its record was not read")
	}
	rec := recordOf(e)
	j := s.liveJob(t.Name, key)
	if j != nil {
		// The store holds the entry from the moment begin commits, but
		// the job is counted (the queue metric) and given its shown
		// state only after begin returns, just before ready closes: a
		// lookup in between read "queued" from a job not yet counted.
		select {
		case <-j.ready:
		case <-r.Context().Done():
			// The client is gone; nothing it reads depends on this.
			return nil, wire.Errorf(wire.CodeUnavailable, "the request ended while the record of %s was being written; ask again", key)
		}
	}
	if !wire.Final(rec.State) && j != nil {
		// The live job's own state: one recorded running waits for its
		// slot as queued (job.go, execute).
		j.mu.Lock()
		rec.State = j.state
		j.mu.Unlock()
		rec.Started = rec.State == wire.StateRunning
	}
	if !wire.Final(rec.State) && j == nil && s.cfg.StoreURL == "" {
		// No job of this process holds it (recover marked those of
		// earlier ones lost): its end could not be stored.
		rec.State = wire.StateLost
		rec.Error = wire.Errorf(wire.CodeStoreFailed, "the %s ended but its final record could not be stored: its outcome is lost, and it is never run again under this key", e.Kind)
	}
	return rec, nil
}

// recordOf is an entry's record: the stored final one, or one made from
// its state (queued, running, or lost by recover).
func recordOf(e *entry) *wire.Record {
	rec := &wire.Record{}
	if len(e.Record) > 0 && json.Unmarshal(e.Record, rec) == nil && wire.Final(rec.State) {
		return rec
	}
	rec = &wire.Record{Key: e.Key, State: e.State, Started: e.Started, Created: e.Created}
	if e.State == wire.StateLost {
		if e.Started {
			rec.Error = wire.Errorf(wire.CodeLost, "the executor stopped while the %s ran: it may have partly run, and is never run again under this key", e.Kind)
		} else {
			rec.Error = wire.Errorf(wire.CodeLost, "the executor stopped before the %s started: it did not run, and is never run under this key", e.Kind)
		}
	}
	return rec
}
