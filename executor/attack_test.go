package executor_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
)

// TestSlowReaderReleasedFromStream: a tenant that starts a run with a lot
// of output and never reads its event stream must not pin the handler,
// the connection and the run's whole event log forever: once a write has
// blocked for the stream write timeout the executor drops the stream. The
// run itself completes (its record says so); a reader who comes back later
// finds the stream cut before its result event.
func TestSlowReaderReleasedFromStream(t *testing.T) {
	defer executor.SetStreamWriteTimeout(time.Second)()
	p := startInproc(t, 1, nil)
	// A second listener on the same server whose sockets buffer little,
	// so a reader that stops reading blocks the server's writes soon.
	hs := httptest.NewUnstartedServer(p.srv.Handler())
	hs.Listener = smallBufListener{hs.Listener}
	hs.StartTLS()
	defer hs.Close()
	pool := x509.NewCertPool()
	pool.AddCert(hs.Certificate())
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
				rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
				return nil
			}}
			return d.DialContext(ctx, network, addr)
		},
		ReadBufferSize: 4096,
	}
	defer tr.CloseIdleConnections()
	body := `{"idempotency_key":"slow-1","command":{"shell":"head -c 1000000 /dev/zero | tr '\\0' x","network":{},"limits":{"output":1000000}}}`
	req, _ := http.NewRequest("POST", hs.URL+"/v1/runs", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.toks.a)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read nothing until the run is over and the server's writes have
	// been blocked for well over the timeout.
	c := p.client(t, p.toks.a)
	waitFor(t, func() bool { s, _, _ := c.State(context.Background(), "slow-1"); return s == "completed" })
	time.Sleep(4 * time.Second)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	types := map[string]int{}
	for sc.Scan() {
		var ev struct{ Type string }
		json.Unmarshal(sc.Bytes(), &ev)
		types[ev.Type]++
	}
	t.Logf("events %v, end: %v", types, sc.Err())
	if types["result"] > 0 {
		t.Error("a reader stalled far past the write timeout still got the whole stream: the handler held it the whole time")
	}
	// The same for the record (1.3 MB of base64 stdout) read by GET.
	req, _ = http.NewRequest("GET", hs.URL+"/v1/runs/slow-1", nil)
	req.Header.Set("Authorization", "Bearer "+p.toks.a)
	resp2, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	time.Sleep(4 * time.Second)
	var rec struct{ State string }
	if err := json.NewDecoder(resp2.Body).Decode(&rec); err == nil {
		t.Errorf("a GET reader stalled far past the write timeout still got the whole record (%s)", rec.State)
	}
}

type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestRunLimitsCappedByExecutor: a tenant asking for 64 GiB of memory and
// of /tmp gets the executor's caps (box's defaults unless configured), not
// a run that can take the host's memory from every other tenant.
func TestRunLimitsCappedByExecutor(t *testing.T) {
	p := startInproc(t, 1, nil)
	c := p.client(t, p.toks.a)
	res, err := remote.New(c, nil).Run(context.Background(), box.Command{
		Shell:  `echo "as=$(ulimit -v)"; df -k /tmp | tail -1 | awk '{print "tmp=" $2}'`,
		Limits: box.Limits{Memory: 64 << 30, Disk: 64 << 30, Pids: 1 << 30, OutputFiles: 64 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	var as, tmp string
	for _, l := range strings.Fields(res.Stdout) {
		if v, ok := strings.CutPrefix(l, "as="); ok {
			as = v
		}
		if v, ok := strings.CutPrefix(l, "tmp="); ok {
			tmp = v
		}
	}
	if kb, err := strconv.ParseInt(tmp, 10, 64); err != nil || kb > box.DefaultDisk/1024 {
		t.Errorf("/tmp is %s KiB, want at most %d (stdout %q)", tmp, box.DefaultDisk/1024, res.Stdout)
	}
	if as != "unlimited" { // unlimited: memory is bounded by a cgroup instead
		if kb, err := strconv.ParseInt(as, 10, 64); err != nil || kb > box.DefaultMemory/1024 {
			t.Errorf("address space %s KiB, want at most %d", as, box.DefaultMemory/1024)
		}
	}
}

// TestEvalReattachDoesNotGrowLog: a tenant re-attaching over and over to
// its own eval while a tool call waits must not grow the eval's event log
// by a copy of the call (and its arguments, up to MaxToolBytes) per
// attach: that memory is not bounded by anything. Each attach still gets
// the waiting call handed to it, once, after the events before it.
func TestEvalReattachDoesNotGrowLog(t *testing.T) {
	p := startEvals(t)
	hc := p.hs.Client()
	body := `{"idempotency_key":"att-1","code":"puts 'before'; add(1, 2)","tools":["add"],"limits":{"timeout_ms":120000}}`
	// attach posts the eval and reads its stream until the waiting call
	// is handed to this follower; it returns the tool_call events seen and
	// whether the stdout before the call came first.
	attach := func() (calls int, id uint64, outFirst bool) {
		req, _ := http.NewRequest("POST", p.hs.URL+"/v1/evals", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+p.toks.a)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		var holder uint64
		sawOut := false
		for sc.Scan() {
			var ev struct {
				Type  string
				Extra json.RawMessage
			}
			json.Unmarshal(sc.Bytes(), &ev)
			var x struct{ Holder, ID uint64 }
			json.Unmarshal(ev.Extra, &x)
			switch ev.Type {
			case "stdout":
				sawOut = true
			case "holder":
				holder = x.Holder
			case "tool_call":
				calls++
				if x.Holder == holder {
					return calls, x.ID, sawOut
				}
			case "result":
				t.Fatalf("eval ended: %s", sc.Text())
			}
		}
		t.Fatalf("stream ended without the call handed to holder %d: %v", holder, sc.Err())
		return
	}
	for range 10 {
		attach()
	}
	calls, id, outFirst := attach()
	if calls > 2 {
		t.Errorf("the 11th attach replayed %d tool_call events for one waiting call: each attach added one to the log", calls)
	}
	if !outFirst {
		t.Error("the waiting call was handed over before the output the guest wrote before it")
	}
	req, _ := http.NewRequest("POST", p.hs.URL+"/v1/evals/att-1/tool-results", strings.NewReader(fmt.Sprintf(`{"id":%d,"reply":"i\n3"}`, id)))
	req.Header.Set("Authorization", "Bearer "+p.toks.a)
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("answering: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestRefusedPathLoggedBounded: an unauthenticated peer sending requests
// with paths of hundreds of kilobytes must not get each one copied whole
// into the executor's log (one line per refusal): the logged path is cut.
func TestRefusedPathLoggedBounded(t *testing.T) {
	p := startInproc(t, 1, nil)
	long := "/v1/runs/" + strings.Repeat("k", 200<<10)
	req, _ := http.NewRequest("GET", p.hs.URL+long, nil)
	resp, err := p.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := len(p.logs.String()); n > 4096 {
		t.Errorf("one refused request wrote %d bytes of log", n)
	}
}

// TestSessionCreationBoundedWhileMaking: a tenant firing 40 POST
// /v1/sessions at once over separate connections, each naming other
// tools (so each would make a runtime and a VM), gets its cap of 2
// sessions and no more runtimes are made than that.
func TestSessionCreationBoundedWhileMaking(t *testing.T) {
	p := startInproc(t, 1, nil)
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, MaxSessions: 2}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	codes := make(chan int, n)
	for i := range n {
		go func() {
			req, _ := http.NewRequest("POST", p.hs.URL+"/v1/sessions", strings.NewReader(fmt.Sprintf(`{"tools":["t%d"]}`, i)))
			req.Header.Set("Authorization", "Bearer "+p.toks.a)
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.pool, ServerName: "example.com"}}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	ok := 0
	for range n {
		if <-codes == http.StatusOK {
			ok++
		}
	}
	if ok != 2 {
		t.Errorf("%d sessions made, want 2", ok)
	}
	if got := p.srv.ToolSets(); got > 2 {
		t.Errorf("%d tool-set runtimes were made for a cap of 2 sessions", got)
	}
}
