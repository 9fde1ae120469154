package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
)

// TestClassification: what reached a server that is not the executor (a
// proxy) or a stream cut short is in doubt; a documented refusal is not.
// (The real executor's cases are in package executor's tests.)
func TestClassification(t *testing.T) {
	var mode string // the server's behaviour for the next run (set between requests)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/info", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"version":"v1","backend":"bwrap","isolation":"namespaces","tenant":"a"}`)
	})
	mux.HandleFunc("/v1/runs", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		switch mode {
		case "proxy502":
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>bad gateway</html>")
		case "cut":
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, `{"type":"accepted","key":"k","state":"running"}`+"\n")
		case "refused":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"code":"queue_full","message":"full"}}`)
		}
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	c, err := Dial(context.Background(), Config{URL: srv.URL, Token: "t", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if c.Isolation() != box.IsolationNamespaces {
		t.Errorf("isolation %q", c.Isolation())
	}
	for _, tc := range []struct {
		mode, code string
		doubt      bool
	}{{"proxy502", "bad_response", true}, {"cut", "transport", true}, {"refused", "queue_full", false}} {
		mode = tc.mode
		_, err := c.Run(context.Background(), remote.Request{Command: box.Command{Argv: []string{"true"}}})
		var ce *Error
		if !errors.As(err, &ce) || ce.Code != tc.code || ce.InDoubt() != tc.doubt || errors.Is(err, remote.ErrInDoubt) != tc.doubt || ce.Key == "" {
			t.Errorf("%s: got %v", tc.mode, err)
		}
	}
}

// TestDialTokenFile: a token read whole from the file glovebox executor
// token wrote ends in a newline; Dial sends the token without it (Go's
// HTTP client used to refuse the header: "invalid header field value").
func TestDialTokenFile(t *testing.T) {
	var got string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		io.WriteString(w, `{"version":"v1","backend":"bwrap","isolation":"namespaces","tenant":"a"}`)
	}))
	defer srv.Close()
	if _, err := Dial(context.Background(), Config{URL: srv.URL, Token: "gbx_abc\n", HTTPClient: srv.Client()}); err != nil || got != "Bearer gbx_abc" {
		t.Fatalf("Dial: %v; the server saw %q", err, got)
	}
}
