package egress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/httptool"
)

// oneHost resolves allowed.test to the loopback and nothing else.
type oneHost struct{}

func (oneHost) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host == "allowed.test" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestLabelsRefuseLabelledEgress: a tool that runs a command for the
// guest, its egress inspected with egress.Labels, under a Runtime whose
// customer tool labels an email. The guest hands the command the email
// shifted by one letter (which no sink recognises) and the command
// shifts it back and posts it: the proxy refuses that request, naming
// the kind, and the host server never gets it; a request without the
// value passes.
func TestLabelsRefuseLabelledEgress(t *testing.T) {
	const email = "ada.lovelace@example.org"
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		io.WriteString(w, "posted")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	bx, err := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{Ports: []int{port},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Resolver: oneHost{}})})
	b := boxtest.Available(t, bx, err)
	script := fmt.Sprintf(`
import sys, urllib.request, urllib.error
text = sys.argv[1].translate(str.maketrans("bcdefghijklmnopqrstuvwxyza", "abcdefghijklmnopqrstuvwxyz"))
try:
    print(urllib.request.urlopen(urllib.request.Request("http://allowed.test:%d/", data=text.encode()), timeout=10).read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`, port)
	var ts glovebox.Toolset
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ts.Func("customer", func() map[string]string { return map[string]string{"email": email} }))
	must(ts.Func("post", func(ctx context.Context, text string) (string, error) {
		res, err := b.Run(ctx, box.Command{Argv: []string{"python3", "-c", script, text},
			Network: box.Network{Allow: []string{"allowed.test"}, Inspect: egress.Labels(ctx)}})
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr)), nil
	}))
	must(ts.Label("customer", glovebox.Label{Kind: glovebox.KindEmail, Path: "email"}))
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1})
	must(err)
	defer rt.Close()
	res, err := rt.Eval(context.Background(), `e = customer["email"]
		[post("ifmmp xpsme"), post("to " + e.tr("a-z", "b-za"))]`)
	must(err)
	if res.Status != glovebox.StatusOK {
		t.Fatalf("status %s: %+v", res.Status, res.Error)
	}
	v, _ := res.Value.([]any)
	if len(v) != 2 || v[0] != "posted" {
		t.Fatalf("value %#v", res.Value)
	}
	if s, _ := v[1].(string); !strings.HasPrefix(s, "403 egress proxy: ") || !strings.Contains(s, "post may not receive email data: keyword body holds a labelled email value") {
		t.Errorf("the shifted email's request gave %q, want the proxy's refusal", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "hello world" {
		t.Errorf("the server got %q, want only the request without the email", got)
	}

	// Outside a labelled eval, Labels lets everything through.
	if err := egress.Labels(context.Background())(box.EgressRequest{Host: "allowed.test", Body: []byte(email)}); err != nil {
		t.Errorf("outside an eval: %v", err)
	}
}
