package executor_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
)

// TestRunWithoutKeyAlwaysRuns: with no idempotency key (remote.New(c,
// nil), or a raw request without one), the same command sent three times
// runs three times, on a real executor process; a key is only what a
// caller gives on purpose.
func TestRunWithoutKeyAlwaysRuns(t *testing.T) {
	setup := newProcSetup(t, 1)
	p := setup.start(t)
	c := setup.client(t, "https://"+p.url, setup.toks.a)
	b := remote.New(c, nil)
	seen := map[string]bool{}
	for range 3 {
		res, err := b.Run(context.Background(), box.Command{Argv: []string{"date", "+%s%N"}})
		if err != nil {
			t.Fatal(err)
		}
		seen[res.Stdout] = true
	}
	if len(seen) != 3 {
		t.Errorf("three runs without a key gave %d different answers: %v", len(seen), seen)
	}
	if strings.Contains(p.stderr.String(), "answered from the store") {
		t.Errorf("a keyless run was answered from the store:\n%s", p.stderr.String())
	}

	// The wire: a body without idempotency_key gets a fresh key each time.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: setup.pool}}}
	defer hc.CloseIdleConnections()
	keys := map[string]bool{}
	for range 2 {
		req, _ := http.NewRequest("POST", "https://"+p.url+"/v1/runs", strings.NewReader(`{"command":{"argv":["date","+%s%N"]}}`))
		req.Header.Set("Authorization", "Bearer "+setup.toks.a)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev struct{ Type, Key, State string }
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == "accepted" {
				if !strings.HasPrefix(ev.Key, "r-") || bytes.Contains(sc.Bytes(), []byte(`"attached":true`)) {
					t.Errorf("accepted %s", sc.Bytes())
				}
				keys[ev.Key] = true
			}
		}
		resp.Body.Close()
	}
	if len(keys) != 2 {
		t.Errorf("two keyless requests got keys %v", keys)
	}
}
