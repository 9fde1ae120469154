package executor_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
	"github.com/gloveboxhq/glovebox/httptool"
)

// tenantTok holds two tenants' tokens for every test.
type tenantTok struct{ a, b string }

func mintTenants(t testing.TB) (tenantTok, []executor.Tenant) {
	ta, ha, err := executor.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	tb, hb, _ := executor.MintToken()
	return tenantTok{ta, tb}, []executor.Tenant{
		{Name: "a", TokenSHA256: ha, MaxConcurrentRuns: 8, MaxQueuedRuns: 400, MaxRequestBytes: 1 << 20},
		{Name: "b", TokenSHA256: hb},
	}
}

// counter is a host HTTP endpoint outside every sandbox: each GET /hit
// adds one. It proves how many times a command really ran.
type counter struct {
	srv  *httptest.Server
	n    atomic.Int64
	port int
}

func newCounter(t testing.TB) *counter {
	c := &counter{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/hit") {
			c.n.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(c.srv.Close)
	ap := netip.MustParseAddrPort(strings.TrimPrefix(c.srv.URL, "http://"))
	c.port = int(ap.Port())
	return c
}

// hitShell is a shell command hitting the counter from inside the box
// through its egress proxy (python3's urllib honours HTTP_PROXY).
func (c *counter) hitShell(tag string) string {
	return fmt.Sprintf(`python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d/hit/%s').read()"`, c.port, tag)
}

// egressBase lets the boxes reach the counter on loopback (and nothing
// else: the command's allowlist names 127.0.0.1).
func egressBase(port int) httptool.Config {
	return httptool.Config{AllowIPLiterals: true, Ports: []int{port}, TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
}

func requireBwrap(t testing.TB) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap (bubblewrap) is not installed: the executor's runs need a backend")
	}
}

// inproc is an executor served in this process over TLS on loopback.
type inproc struct {
	srv  *executor.Server
	hs   *httptest.Server
	toks tenantTok
	pool *x509.CertPool
	logs *syncBuf
	dir  string
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func startInproc(t testing.TB, port int, mod func(*executor.Config)) *inproc {
	requireBwrap(t)
	toks, tenants := mintTenants(t)
	b, err := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(egressBase(port))})
	if err != nil {
		t.Fatal(err)
	}
	p := &inproc{toks: toks, logs: &syncBuf{}, dir: t.TempDir()}
	cfg := executor.Config{Backend: b, StorePath: filepath.Join(p.dir, "store.db"), Tenants: tenants,
		Logger: slog.New(slog.NewTextHandler(p.logs, nil))}
	if mod != nil {
		mod(&cfg)
	}
	p.srv, err = executor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.hs = httptest.NewUnstartedServer(p.srv.Handler())
	p.hs.EnableHTTP2 = true
	p.hs.StartTLS()
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.hs.Certificate())
	t.Cleanup(func() {
		p.hs.Close()
		p.srv.Close()
	})
	return p
}

func (p *inproc) client(t testing.TB, tok string) *client.Client {
	c, err := client.Dial(context.Background(), client.Config{URL: p.hs.URL, Token: tok, RootCAs: p.pool})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// built is the glovebox binary, built once for the tests that need a real
// executor process.
var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

func glovebox(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gb-exec-test")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "glovebox")
		out, err := exec.Command("go", "build", "-o", built, "../cmd/glovebox").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	if os.Getenv("EXECUTOR_TEST_PROBE_WORKER") != "" { // worker_test.go
		probeWorker()
	}
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}

// proc is a real executor process on loopback.
type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuf
	done   chan struct{}
}

// procSetup writes the config, certificate and tokens a process uses.
type procSetup struct {
	dir, config, store, cert, key string
	toks                          tenantTok
	pool                          *x509.CertPool
	extra                         []string // more executor flags (eval_test.go)
}

func newProcSetup(t testing.TB, port int) *procSetup {
	requireBwrap(t)
	gb := glovebox(t)
	s := &procSetup{dir: t.TempDir()}
	s.config, s.store = filepath.Join(s.dir, "executor.yaml"), filepath.Join(s.dir, "store.db")
	s.cert, s.key = filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem")
	// The CLI makes the certificate and the tokens, as an operator would.
	if out, err := exec.Command(gb, "executor", "devcert", "--out", s.dir).CombinedOutput(); err != nil {
		t.Fatalf("devcert: %v %s", err, out)
	}
	certPEM, err := os.ReadFile(s.cert)
	if err != nil {
		t.Fatal(err)
	}
	s.pool = x509.NewCertPool()
	s.pool.AppendCertsFromPEM(certPEM)
	var y strings.Builder
	toks := map[string]string{}
	for _, name := range []string{"a", "b"} {
		cmd := exec.Command(gb, "executor", "token", "--tenant", name)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("token: %v %s", err, stderr.String())
		}
		toks[name] = strings.TrimSpace(string(out))
		entry := stderr.String()
		if name == "a" {
			y.WriteString(entry)
		} else {
			y.WriteString(strings.TrimPrefix(entry, "tenants:\n"))
		}
		if !strings.Contains(entry, executor.HashToken(toks[name])) {
			t.Fatalf("token entry %q lacks the token's hash", entry)
		}
	}
	s.toks = tenantTok{toks["a"], toks["b"]}
	fmt.Fprintf(&y, "egress:\n  trusted_prefixes: [127.0.0.0/8]\n  allow_ip_literals: true\n  ports: [%d]\n", port)
	os.WriteFile(s.config, []byte(y.String()), 0o644)
	return s
}

// start runs `glovebox executor` on a free loopback port and waits for
// it to listen. The process is killed at cleanup.
func (s *procSetup) start(t testing.TB) *proc {
	gb := glovebox(t)
	p := &proc{stderr: &syncBuf{}, done: make(chan struct{})}
	p.cmd = exec.Command(gb, append([]string{"executor", "--listen", "127.0.0.1:0", "--config", s.config, "--store", s.store,
		"--tls-cert", s.cert, "--tls-key", s.key, "--backend", "bwrap"}, s.extra...)...)
	pr, pw := io.Pipe()
	p.cmd.Stderr = pw
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); pw.Close(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.stderr.Write([]byte(line + "\n"))
			if a, ok := strings.CutPrefix(line, "glovebox executor: listening on "); ok {
				addr <- strings.TrimPrefix(strings.Fields(a)[0], "https://")
			}
		}
	}()
	select {
	case a := <-addr:
		p.url = a
	case <-p.done:
		t.Fatalf("executor exited: %s", p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("executor did not listen: %s", p.stderr.String())
	}
	return p
}

// kill SIGKILLs the executor's whole process group and waits for it,
// then anything still running the glovebox binary under test: a bwrap
// worker's sandbox init can miss its parent's death (a later executor's
// sweep would kill it, a minute on), and a test must leave no process.
func (p *proc) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	if built == "" {
		return
	}
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmds {
		b, err := os.ReadFile(c)
		if err != nil || !strings.Contains(string(b), built) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(c))); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (s *procSetup) client(t testing.TB, url, tok string) *client.Client {
	c, err := client.Dial(context.Background(), client.Config{URL: url, Token: tok, RootCAs: s.pool})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var _ = tls.VersionTLS12
var _ box.Box
