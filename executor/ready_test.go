package executor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gloveboxhq/glovebox/box/bwrap"
)

// failingStore is the real store whose final-record and probe writes
// fail while fail is set: a disk that refuses writes although statfs
// shows room (a failed device, SQLite's own limit), which a real disk
// cannot be made to do on demand.
type failingStore struct {
	store
	fail atomic.Bool
}

var errWrite = errors.New("disk I/O error")

func (f *failingStore) finish(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	if f.fail.Load() {
		return errWrite
	}
	return f.store.finish(ctx, tenant, key, state, started, record)
}

func (f *failingStore) probe(ctx context.Context) error {
	if f.fail.Load() {
		return errWrite
	}
	return f.store.probe(ctx)
}

// TestReadyReflectsFailedWrites: a run whose final record cannot be
// written streams lost/store_failed (never completed); /readyz is 503
// from then on, while writes (its probe included) fail, and 200 again as
// soon as one succeeds.
func TestReadyReflectsFailedWrites(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap (bubblewrap) is not installed: the executor's runs need a backend")
	}
	b, err := bwrap.New(bwrap.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tok, sha, _ := MintToken()
	var fs *failingStore
	s, err := New(Config{Backend: b, StorePath: filepath.Join(t.TempDir(), "store.db"), Tenants: []Tenant{{Name: "a", TokenSHA256: sha}}, MinStoreFree: -1,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		wrapStore: func(st store) store { fs = &failingStore{store: st}; return fs }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	ready := func() (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
		return w.Code, w.Body.String()
	}
	if code, body := ready(); code != 200 {
		t.Fatalf("/readyz %d %s", code, body)
	}
	fs.fail.Store(true)
	w := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/runs", strings.NewReader(`{"command":{"argv":["echo","done"]}}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	h.ServeHTTP(w, req)
	lines := strings.Split(strings.TrimSpace(w.Body.String()), "\n")
	last := lines[len(lines)-1]
	if w.Code != http.StatusOK || !strings.Contains(last, `"type":"result"`) || !strings.Contains(last, `"state":"lost"`) ||
		!strings.Contains(last, `"code":"store_failed"`) || strings.Contains(w.Body.String(), `"completed"`) {
		t.Errorf("the run whose record could not be stored streamed:\n%s", w.Body.String())
	}
	for range 2 {
		if code, body := ready(); code != 503 || !strings.Contains(body, errWrite.Error()) {
			t.Errorf("/readyz while writes fail: %d %s", code, body)
		}
	}
	fs.fail.Store(false)
	for range 2 {
		if code, body := ready(); code != 200 {
			t.Errorf("/readyz once writes succeed: %d %s", code, body)
		}
	}
}
