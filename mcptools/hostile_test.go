package mcptools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// hostileBytes is how much a hostile server offers to send: far past
// every cap, yet not so much that a host without caps (the code before
// them) takes the test machine down proving it.
const hostileBytes = 256 << 20

// rpcIn is what a hostile server reads of a request.
type rpcIn struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// hostileServer is a real go-sdk server (one tool, "hit") behind a
// handler that answers the requests attack takes (it returns true) its
// own way; sent counts the bytes attack wrote.
func hostileServer(t *testing.T, attack func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "hit", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("fine"), nil })
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	sent := new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			var in rpcIn
			json.Unmarshal(body, &in)
			if attack(w, in, sent) {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, sent
}

// flood writes prefix, then filler bytes (each chunk ending with sep
// when sep is set) until hostileBytes are written or the client stops
// reading.
func flood(w http.ResponseWriter, sent *atomic.Int64, prefix string, chunk []byte) {
	n, _ := io.WriteString(w, prefix)
	sent.Add(int64(n))
	for sent.Load() < hostileBytes {
		n, err := w.Write(chunk)
		sent.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// allocated runs f and returns the bytes the Go heap allocated meanwhile
// (TotalAlloc's growth: an upper bound on what f held at once) and the
// most the heap in use grew, sampled every 5 ms.
func allocated(f func()) (total, peak uint64) {
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	done := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		var most uint64
		var m goruntime.MemStats
		for {
			goruntime.ReadMemStats(&m)
			if m.HeapInuse > before.HeapInuse && m.HeapInuse-before.HeapInuse > most {
				most = m.HeapInuse - before.HeapInuse
			}
			select {
			case <-done:
				sampled <- most
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	f()
	close(done)
	peak = <-sampled
	goruntime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, peak
}

// A bound HTTP server that answers a tool call with no end of bytes (a
// JSON body that never closes, an SSE event that never ends, as one line
// or as many, an endless stream of small events, a huge error body) gets
// the guest an MCPProtocolError naming the server and the cap, soon; the
// host reads little more than the cap and allocates a bounded amount
// (before the caps, one such call took 4.7 GB in 15 s).
func TestHostileHTTPResponsesCapped(t *testing.T) {
	const msgCap, respCap = 1 << 20, 4 << 20
	a := bytes.Repeat([]byte("a"), 32<<10)
	lines := bytes.Repeat([]byte("data: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"), 512)
	events := bytes.Repeat([]byte(`data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`+strings.Repeat("n", 900)+`"}}`+"\n\n"), 32)
	for _, c := range []struct {
		name, want string
		attack     func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64)
	}{
		{"JSON body", "MaxMessageBytes", func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) {
			w.Header().Set("Content-Type", "application/json")
			flood(w, sent, `{"jsonrpc":"2.0","id":`+string(in.ID)+`,"result":{"content":[{"type":"text","text":"`, a)
		}},
		{"SSE line", "MaxMessageBytes", func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) {
			w.Header().Set("Content-Type", "text/event-stream")
			flood(w, sent, `data: {"jsonrpc":"2.0","id":`+string(in.ID)+`,"result":{"content":[{"type":"text","text":"`, a)
		}},
		{"SSE event of many lines", "MaxMessageBytes", func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) {
			w.Header().Set("Content-Type", "text/event-stream")
			flood(w, sent, "id: 1\n", lines)
		}},
		{"SSE stream of small events", "MaxResponseBytes", func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) {
			w.Header().Set("Content-Type", "text/event-stream")
			flood(w, sent, "", events)
		}},
		{"error body", "MaxMessageBytes", func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest) // read for its JSON-RPC error (a 5xx is not)
			flood(w, sent, `{"jsonrpc":"2.0","id":`+string(in.ID)+`,"error":{"code":-32603,"message":"`, a)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, sent := hostileServer(t, func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) bool {
				if in.Method != "tools/call" {
					return false
				}
				c.attack(w, in, sent)
				return true
			})
			var ts glovebox.Toolset
			b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{MaxMessageBytes: msgCap, MaxResponseBytes: respCap},
				mcptools.Server{Name: "evil", URL: srv.URL + "/mcp?api_key=sk-live-SECRET"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			rt := runtime(t, &ts, glovebox.Limits{Timeout: 60 * time.Second})
			var res *glovebox.Result
			start := time.Now()
			alloc, peak := allocated(func() {
				res = eval(t, rt, `begin; hit; "no error"; rescue Glovebox::MCPProtocolError => e; e.message; end`)
			})
			msg, _ := wantOK(t, res).(string)
			t.Logf("%v: %s; the server sent %d bytes; the host allocated %d MiB, its heap grew by %d MiB at most", time.Since(start).Round(time.Millisecond), msg, sent.Load(), alloc>>20, peak>>20)
			for _, w := range []string{`"evil"`, c.want, fmt.Sprint(map[string]int{"MaxMessageBytes": msgCap, "MaxResponseBytes": respCap}[c.want])} {
				if !strings.Contains(msg, w) {
					t.Errorf("the guest's error does not say %s: %q", w, msg)
				}
			}
			if strings.Contains(msg, "SECRET") || strings.Contains(msg, srv.URL) {
				t.Errorf("the guest's error shows the server's URL: %q", msg)
			}
			// The go-sdk allocates some 90 KiB for each message it
			// decodes, whatever its size: a stream of small events is
			// bounded by what the heap holds, the rest by all it took.
			if c.want == "MaxResponseBytes" {
				alloc = 0
			}
			if alloc > 64<<20 || peak > 64<<20 {
				t.Errorf("the host allocated %d MiB, its heap grew by %d MiB, for one hostile call (caps %d and %d bytes)", alloc>>20, peak>>20, msgCap, respCap)
			}
			if limit := int64(2*respCap + 1<<20); sent.Load() > limit {
				t.Errorf("the host read up to %d bytes of one hostile answer (caps %d and %d bytes)", sent.Load(), msgCap, respCap)
			}
		})
	}
}

// A listing that goes on (1,000 pages of 2 MiB each once took 2.3 GB
// during Bind) fails the Bind with an error naming the server and the
// cap, having read and held a bounded amount: the pages' bytes, their
// tools and their number are each capped.
func TestHostileListingCapped(t *testing.T) {
	tool := `{"name":"t%d_%d","description":"` + strings.Repeat("d", 1000) + `","inputSchema":{"type":"object"}}`
	page := func(p, n int) string {
		var b strings.Builder
		b.WriteString(`{"tools":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, tool, p, i)
		}
		fmt.Fprintf(&b, `],"nextCursor":"p%d"}`, p+1)
		return b.String()
	}
	for _, c := range []struct {
		name, want string
		perPage    int
		cfg        mcptools.Config
	}{
		{"bytes", "MaxListBytes", 2000, mcptools.Config{MaxListBytes: 4 << 20, MaxListTools: 1 << 20}},
		{"tools", "MaxListTools", 2000, mcptools.Config{MaxListTools: 3000}},
		{"pages", "pages", 0, mcptools.Config{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pages, most := 0, 100 // 220 MB of listing: a host without caps survives it
			if c.perPage == 0 {
				most = 1000
			}
			srv, sent := hostileServer(t, func(w http.ResponseWriter, in rpcIn, sent *atomic.Int64) bool {
				if in.Method != "tools/list" || pages >= most {
					return false
				}
				body := `{"jsonrpc":"2.0","id":` + string(in.ID) + `,"result":` + page(pages, c.perPage) + `}`
				pages++
				w.Header().Set("Content-Type", "application/json")
				n, _ := io.WriteString(w, body)
				sent.Add(int64(n))
				return true
			})
			var err error
			alloc, peak := allocated(func() {
				var ts glovebox.Toolset
				var b *mcptools.Binding
				if b, err = mcptools.Bind(context.Background(), &ts, c.cfg, mcptools.Server{Name: "evil", URL: srv.URL + "/mcp#SECRET"}); err == nil {
					b.Close()
				}
			})
			t.Logf("%v; %d pages, %d bytes sent, %d MiB allocated, the heap grew by %d MiB at most", err, pages, sent.Load(), alloc>>20, peak>>20)
			if err == nil || !strings.Contains(err.Error(), `"evil"`) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("Bind of an endless listing: %v", err)
			}
			// The go-sdk allocates some 60 KiB for each tool it checks,
			// whatever its size: 3,000 tools are 200 MiB of garbage.
			if alloc > 512<<20 || peak > 128<<20 {
				t.Errorf("Bind allocated %d MiB, its heap grew by %d MiB, for an endless listing", alloc>>20, peak>>20)
			}
			if sent.Load() > 16<<20 {
				t.Errorf("Bind read %d bytes of an endless listing", sent.Load())
			}
		})
	}
}

// A stdio server's line that never ends is cut at MaxMessageBytes: the
// guest gets an MCPProtocolError naming the server and the cap, and the
// host allocates a bounded amount.
func TestHostileStdioLineCapped(t *testing.T) {
	const msgCap = 1 << 20
	exe, _ := os.Executable()
	srv := mcptools.Server{Name: "evil", Command: []string{exe}, Env: append(os.Environ(), "MCPTOOLS_TEST_SERVER=raw", "MCPTOOLS_TEST_ENDLESS=1",
		`MCPTOOLS_TEST_LISTING={"tools":[{"name":"hit","inputSchema":{"type":"object"}}]}`)}
	var ts glovebox.Toolset
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{MaxMessageBytes: msgCap}, srv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 60 * time.Second})
	var res *glovebox.Result
	alloc, peak := allocated(func() {
		res = eval(t, rt, `begin; hit; "no error"; rescue Glovebox::MCPProtocolError => e; e.message; end`)
	})
	msg, _ := wantOK(t, res).(string)
	t.Logf("%s; the host allocated %d MiB, its heap grew by %d MiB at most", msg, alloc>>20, peak>>20)
	if !strings.Contains(msg, `server "evil" sent a line of more than 1048576 bytes`) || !strings.Contains(msg, "MaxMessageBytes") {
		t.Errorf("the guest's error: %q", msg)
	}
	if alloc > 64<<20 || peak > 64<<20 {
		t.Errorf("the host allocated %d MiB, its heap grew by %d MiB, for one endless line (cap %d bytes)", alloc>>20, peak>>20, msgCap)
	}
}

// Nothing of a bound server's URL but its name reaches the guest: not
// its userinfo, query, fragment or path (where API keys travel), nor its
// host, through any error a call can end in (connection refused, HTTP
// 500, a body that is no JSON, a timeout), in the message the guest
// rescues or the tool calls the Result records; nor its secrets the
// host's Bind error.
func TestServerURLStaysOutOfErrors(t *testing.T) {
	secrets := []string{"USERSECRET", "pa55w0rd", "PATHSECRET", "QUERYSECRET", "FRAGSECRET"}
	for _, c := range []struct {
		name, class string
		attack      func(w http.ResponseWriter)
		gone        bool // the server is closed before the call
	}{
		{"connection refused", "MCPTransportError", nil, true},
		{"HTTP 500", "MCPTransportError", func(w http.ResponseWriter) {
			http.Error(w, "no: api_key=QUERYSECRET", http.StatusInternalServerError)
		}, false},
		{"not JSON", "MCPServerCrashError", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "this is not JSON QUERYSECRET")
		}, false},
		{"timeout", "MCPTimeoutError", func(w http.ResponseWriter) { time.Sleep(3 * time.Second) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := hostileServer(t, func(w http.ResponseWriter, in rpcIn, _ *atomic.Int64) bool {
				if in.Method != "tools/call" || c.attack == nil {
					return false
				}
				c.attack(w)
				return true
			})
			host := strings.TrimPrefix(srv.URL, "http://")
			u := "http://USERSECRET:pa55w0rd@" + host + "/mcp/tok-PATHSECRET?api_key=QUERYSECRET&v=1#FRAGSECRET"
			var ts glovebox.Toolset
			b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{RestartBackoff: time.Hour}, mcptools.Server{Name: "crm", URL: u})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if c.gone { // no more connections: the next request is refused
				srv.Listener.Close()
				srv.CloseClientConnections()
			}
			rt := runtime(t, &ts, glovebox.Limits{Timeout: 2 * time.Second})
			res := eval(t, rt, `begin; hit; "no error"; rescue Glovebox::ToolError => e; [e.class.name, e.message]; end`)
			out, _ := json.Marshal(res)
			got, _ := wantOK(t, res).([]any)
			if len(got) != 2 || got[0] != "Glovebox::"+c.class || !strings.Contains(fmt.Sprint(got[1]), "crm") {
				t.Fatalf("the guest got %v", got)
			}
			t.Logf("%s: %s", got[0], got[1])
			for _, s := range append(secrets, host, "127.0.0.1", "/mcp") {
				if strings.Contains(string(out), s) {
					t.Errorf("the Result shows %q of the server's URL: %s", s, out)
				}
			}
		})
	}
	// The host's own error names the server and its host, never the
	// secrets of its URL.
	ln := httptest.NewServer(http.NotFoundHandler())
	host := strings.TrimPrefix(ln.URL, "http://")
	ln.Close()
	var ts glovebox.Toolset
	_, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{StartTimeout: 5 * time.Second},
		mcptools.Server{Name: "crm", URL: "http://USERSECRET:pa55w0rd@" + host + "/mcp/tok-PATHSECRET?api_key=QUERYSECRET#FRAGSECRET"})
	if err == nil || !strings.Contains(err.Error(), `"crm"`) {
		t.Fatalf("Bind of a server that is not there: %v", err)
	}
	t.Log(err)
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the Bind error shows %q: %v", s, err)
		}
	}
}
