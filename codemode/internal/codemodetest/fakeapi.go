package codemodetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/codemode"
)

// FakeAPI is a scripted model API on a loopback server: it records every
// request to its path and answers with what Reply returns for it.
type FakeAPI struct {
	URL string

	mu       sync.Mutex
	requests []map[string]any
	headers  []http.Header
}

// NewFakeAPI starts a server answering POST path; reply gets the request
// number (from 0) and the decoded body, and returns the HTTP status and
// the body to send as JSON. Other requests get 404. The server stops when
// t ends.
func NewFakeAPI(t testing.TB, path string, reply func(n int, req map[string]any) (int, any)) *FakeAPI {
	f := &FakeAPI{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != path {
			t.Errorf("fake API: unexpected %s %s", r.Method, r.URL.Path)
			http.Error(w, `{"error":{"type":"not_found","message":"no such endpoint"}}`, http.StatusNotFound)
			return
		}
		b, err := io.ReadAll(r.Body)
		var req map[string]any
		if err == nil {
			err = json.Unmarshal(b, &req)
		}
		if err != nil {
			t.Errorf("fake API: request body: %v", err)
			http.Error(w, `{"error":{"type":"invalid_request_error","message":"bad body"}}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		n := len(f.requests)
		f.requests = append(f.requests, req)
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
		status, body := reply(n, req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if err := json.NewEncoder(w).Encode(body); err != nil {
			t.Errorf("fake API: writing the reply: %v", err)
		}
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Requests returns the decoded request bodies received so far.
func (f *FakeAPI) Requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.requests...)
}

// Header returns the headers of request n.
func (f *FakeAPI) Header(n int) http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.headers[n]
}

// Dig walks decoded JSON by object keys (string) and array indexes (int),
// returning nil where the path does not exist.
func Dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k < 0 || k >= len(a) {
				return nil
			}
			v = a[k]
		default:
			return nil
		}
	}
	return v
}

// Answer is the final answer the scripted models give, quoting v, the
// value the sandbox computed in their first round.
func Answer(v any) string { return fmt.Sprintf("Your shipped orders total $%v.", v) }

// CheckRun fails t unless a Run over api ended without error, answered
// Answer(ShippedTotal) and made n requests; it returns the requests.
func CheckRun(t testing.TB, api *FakeAPI, answer string, err error, n int) []map[string]any {
	t.Helper()
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := Answer(ShippedTotal); answer != want {
		t.Errorf("answer %q, want %q", answer, want)
	}
	reqs := api.Requests()
	if len(reqs) != n {
		t.Fatalf("%d requests, want %d", len(reqs), n)
	}
	return reqs
}

// CheckMaxRounds fails t unless a Run limited to rounds tool rounds over
// api, whose model always calls tools, ended with ErrMaxRounds after
// running steps programs.
func CheckMaxRounds(t testing.TB, api *FakeAPI, err error, rounds, steps int) {
	t.Helper()
	if !errors.Is(err, codemode.ErrMaxRounds) {
		t.Fatalf("err %v, want ErrMaxRounds", err)
	}
	if n := len(api.Requests()); n != rounds+1 || steps != rounds {
		t.Errorf("%d requests and %d steps, want %d and %d", n, steps, rounds+1, rounds)
	}
}
