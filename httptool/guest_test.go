package httptool

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// The guest tests share one Runtime (made on first use) whose toolset
// holds one Tool; each test resets the tool's budgets first.
var guest struct {
	once   sync.Once
	rt     *glovebox.Runtime
	tool   *Tool
	srv    *httptest.Server
	err    error
	mu     sync.Mutex
	faults []string // dials outside loopback, reported by TestMain
	audit  []AuditEntry
}

func TestMain(m *testing.M) {
	code := m.Run()
	if guest.rt != nil {
		guest.rt.Close()
		guest.srv.Close()
	}
	for _, f := range guest.faults {
		fmt.Fprintln(os.Stderr, "FAIL:", f)
		code = 1
	}
	os.Exit(code)
}

func guestHandler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/echo":
		b, _ := io.ReadAll(r.Body)
		var body any
		json.Unmarshal(b, &body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "json": body, "trace": r.Header.Get("X-Trace"), "type": r.Header.Get("Content-Type")})
	case "/bytes":
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	case "/big":
		io.WriteString(w, strings.Repeat("x", 5000))
	case "/slow":
		<-r.Context().Done()
	case "/redirect":
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	default:
		io.WriteString(w, "hello from "+r.Host)
	}
}

// guestRuntime returns the shared Runtime and resets the tool's budgets.
func guestRuntime(t *testing.T) *glovebox.Runtime {
	t.Helper()
	guest.once.Do(func() {
		guest.srv = httptest.NewServer(http.HandlerFunc(guestHandler))
		fault := func(format string, args ...any) {
			guest.mu.Lock()
			guest.faults = append(guest.faults, fmt.Sprintf(format, args...))
			guest.mu.Unlock()
		}
		d := &redirector{errorf: fault, server: guest.srv.Listener.Addr().String(), refuse: map[string]bool{"93.184.216.99:80": true}}
		guest.tool, guest.err = New(Config{
			AllowHosts: []string{"api.example.com", "*.example.org"},
			Resolver: newResolver(
				"api.example.com", []string{"93.184.216.34"},
				"internal.example.org", []string{"10.0.0.7"},
				"meta.example.org", []string{"169.254.169.254"},
				"down.example.org", []string{"93.184.216.99"},
			),
			Dial:            d.dial,
			MaxRequests:     12,
			MaxResponseBody: 4096,
			Audit: func(ctx context.Context, e AuditEntry) {
				guest.mu.Lock()
				guest.audit = append(guest.audit, e)
				guest.mu.Unlock()
			},
		})
		if guest.err != nil {
			return
		}
		var ts glovebox.Toolset
		if guest.err = guest.tool.Register(&ts); guest.err != nil {
			return
		}
		guest.rt, guest.err = glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1})
	})
	if guest.err != nil {
		t.Fatal(guest.err)
	}
	guest.tool.Reset()
	return guest.rt
}

func evalOK(t *testing.T, code string) any {
	t.Helper()
	res, err := guestRuntime(t).Eval(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusOK {
		t.Fatalf("status %s: %+v\nstdout %s", res.Status, res.Error, res.Stdout)
	}
	return res.Value
}

func TestGuestGetAndJSON(t *testing.T) {
	got := evalOK(t, `
		r = http_get("http://api.example.com/hi")
		p = http_post("http://api.example.com/echo", {"name" => "ada", "tags" => [1, 2.5, nil, true]}, {"X-Trace" => "t1"})
		k = http_request(:put, "http://API.example.com./echo", headers: {accept: "application/json"}, body: [1, {"a" => "b"}])
		[r["status"], r["body"], r["body_encoding"],
		 p["status"], p["body"]["method"], p["body"]["json"], p["body"]["trace"], p["body"]["type"], p["body_encoding"],
		 k["body"]["method"], k["body"]["json"]]`)
	want := []any{
		int64(200), "hello from api.example.com", "text",
		int64(200), "POST", map[string]any{"name": "ada", "tags": []any{int64(1), 2.5, nil, true}}, "t1", "application/json", "json",
		"PUT", []any{int64(1), map[string]any{"a": "b"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %#v\nwant %#v", got, want)
	}
}

// A binary String body is sent byte for byte (it was read as UTF-8,
// each byte above 0x7f a U+FFFD, or sent as JSON).
func TestGuestBinaryBody(t *testing.T) {
	got := evalOK(t, `
		bin = "\x89PNG\xff\x00".b
		r = http_post("http://api.example.com/bytes", bin)
		[r["body_encoding"], r["body"].unpack1("m") == bin, r["body"].unpack1("m").bytes]`)
	want := []any{"base64", true, []any{int64(0x89), int64('P'), int64('N'), int64('G'), int64(0xff), int64(0)}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %#v\nwant %#v", got, want)
	}
}

// TestGuestErrorClasses: each kind of failure is its own rescuable class,
// a Glovebox::ToolError, with a message saying what to do.
func TestGuestErrorClasses(t *testing.T) {
	got := evalOK(t, `
		def try
		  yield
		  "no error"
		rescue Glovebox::ToolError => e
		  [e.class.name, e.message[0, 200]]
		end
		[
		  try { http_get("http://127.0.0.1/") },
		  try { http_get("http://[::ffff:169.254.169.254]/") },
		  try { http_get("ftp://api.example.com/") },
		  try { http_get("http://evil.com/") },
		  try { http_get("http://api.example.com.evil.com/") },
		  try { http_get("http://api.example.com/", {"Host" => "evil.com"}) },
		  try { http_get("http://internal.example.org/") },
		  try { http_get("http://meta.example.org/latest/meta-data/") },
		  try { http_get("http://api.example.com/big") },
		  try { http_get("http://down.example.org/") },
		  try { http_request("TRACE", "http://api.example.com/") },
		]`)
	want := []struct{ class, says string }{
		{"HTTPURLError", "IP-literal hosts"},
		{"HTTPURLError", "IP-literal hosts"},
		{"HTTPURLError", "only http and https"},
		{"HTTPHostError", "not on this sandbox's allowlist"},
		{"HTTPHostError", "not on this sandbox's allowlist"},
		{"HTTPHeaderError", "Host may not be set"},
		{"HTTPBlockedAddressError", "private-network address"},
		{"HTTPBlockedAddressError", "cloud metadata endpoint"},
		{"HTTPResponseTooLargeError", "larger than 4096 bytes"},
		{"HTTPError", "connection refused"},
		{"HTTPArgumentError", "not supported"},
	}
	rows := got.([]any)
	if len(rows) != len(want) {
		t.Fatalf("%v", got)
	}
	for i, w := range want {
		row, _ := rows[i].([]any)
		if len(row) != 2 || row[0] != "Glovebox::"+w.class || !strings.Contains(row[1].(string), w.says) {
			t.Errorf("case %d: %v, want Glovebox::%s saying %q", i, rows[i], w.class, w.says)
		}
		if len(row) == 2 && strings.Contains(row[1].(string), "10.0.0.7") {
			t.Errorf("case %d: the message reveals the resolved address: %v", i, row[1])
		}
	}
	// A server that never answers, with a short request timeout (only
	// this eval runs with it, so no other request depends on its length).
	guest.tool.cfg.RequestTimeout = 100 * time.Millisecond
	got = evalOK(t, `begin; http_get("http://api.example.com/slow"); rescue Glovebox::HTTPTimeoutError => e; e.message; end`)
	guest.tool.cfg.RequestTimeout = DefaultRequestTimeout
	if s, _ := got.(string); !strings.Contains(s, "took longer than 100ms") {
		t.Fatalf("%v", got)
	}
	// A specific class can be rescued on its own, and is a StandardError.
	got = evalOK(t, `
		begin
		  http_get("http://internal.example.org/")
		rescue Glovebox::HTTPBlockedAddressError => e
		  [e.class.ancestors.include?(Glovebox::ToolError), e.is_a?(StandardError)]
		end`)
	if !reflect.DeepEqual(got, []any{true, true}) {
		t.Fatalf("%v", got)
	}
}

// TestGuestRedirect: the guest sees the redirect and cannot follow it to
// the metadata address.
func TestGuestRedirect(t *testing.T) {
	got := evalOK(t, `
		r = http_get("http://api.example.com/redirect")
		follow = begin
		  http_get(r["headers"]["location"])
		rescue Glovebox::HTTPURLError => e
		  e.class.name
		end
		[r["status"], r["headers"]["location"], follow]`)
	if !reflect.DeepEqual(got, []any{int64(302), "http://169.254.169.254/latest/meta-data/", "Glovebox::HTTPURLError"}) {
		t.Fatalf("%v", got)
	}
}

// TestGuestBudget: the request budget runs out across evals and comes
// back after the host's Reset; the guest has no way to reset it.
func TestGuestBudget(t *testing.T) {
	guestRuntime(t)
	got := evalOK(t, `
		n = 0
		err = begin
		  loop { http_get("http://api.example.com/"); n += 1 }
		rescue Glovebox::HTTPBudgetError => e
		  e.message
		end
		[n, err, respond_to?(:reset, true), defined?(Glovebox::HTTPTool)]`).([]any)
	if got[0] != int64(12) || !strings.Contains(got[1].(string), "request budget is spent (12 requests)") || got[2] != false || got[3] != nil {
		t.Fatalf("%v", got)
	}
	// Still spent in the next eval.
	res, err := guest.rt.Eval(context.Background(), `http_get("http://api.example.com/")`)
	if err != nil || res.Status != glovebox.StatusError || res.Error.Class != "Glovebox::HTTPBudgetError" {
		t.Fatalf("%+v %v", res.Error, err)
	}
	guest.tool.Reset()
	if got := evalOK(t, `http_get("http://api.example.com/")["status"]`); got != int64(200) {
		t.Fatalf("%v", got)
	}
	if names := guest.rt.Tools(); !reflect.DeepEqual(names, []string{"http_delete", "http_get", "http_head", "http_patch", "http_post", "http_put", "http_request"}) {
		t.Fatalf("the guest sees %v", names)
	}
}
