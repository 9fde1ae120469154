package sbx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestProxyCredentialOverTLS: with HeaderCred.TLS the guest asks for
// http://host/… and the proxy speaks HTTPS to the host, adding the header
// inside that TLS connection.
func TestProxyCredentialOverTLS(t *testing.T) {
	var got, proto string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, proto = r.Header.Get("X-Key"), "plain"
		if r.TLS != nil {
			proto = "tls"
		}
		io.WriteString(w, "secure")
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dialled string
	dial := func(ctx context.Context, raw string) (net.Conn, error) {
		dialled = raw
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	stop := ServeProxy(context.Background(), ln, dial, map[string]HeaderCred{
		"example.com": {Header: "X-Key", Value: "k1", TLS: &tls.Config{ServerName: "example.com", RootCAs: roots}},
	}, nil)
	defer stop()
	proxy, _ := url.Parse("http://" + ln.Addr().String())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	resp, err := c.Get("http://example.com/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "secure" || got != "k1" || proto != "tls" || dialled != "https://example.com/x" {
		t.Errorf("body %q header %q over %s, dialled %q", body, got, proto, dialled)
	}
}
