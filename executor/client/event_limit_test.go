package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
)

// TestHugeEventRefused: a hostile or broken executor sending one event
// line without end must not make the client (on the application host)
// buffer it all: past maxEventBytes the client stops reading and reports
// bad_response, in doubt (the run may have happened).
func TestHugeEventRefused(t *testing.T) {
	defer func(old int) { maxEventBytes = old }(maxEventBytes)
	maxEventBytes = 1 << 20
	const total = 64 << 20
	var written atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/info", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"version":"v1","backend":"bwrap","isolation":"namespaces","tenant":"a"}`)
	})
	mux.HandleFunc("/v1/runs", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"accepted","key":"k","state":"running"}`+"\n"+`{"type":"stdout","data":"`)
		chunk := strings.Repeat("A", 64<<10)
		for written.Load() < total {
			n, err := io.WriteString(w, chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
		io.WriteString(w, `"}`+"\n")
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	c, err := Dial(context.Background(), Config{URL: srv.URL, Token: "t", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Run(context.Background(), remote.Request{IdempotencyKey: "k", Command: box.Command{Argv: []string{"true"}}})
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != "bad_response" || !ce.InDoubt() {
		t.Errorf("got %v, want bad_response in doubt", err)
	}
}
