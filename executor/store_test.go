package executor

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestStoreRecoverAndPurge: begin is first-writer-wins per (tenant, key);
// recover marks unfinished entries lost; purge drops only old final ones.
func TestStoreRecoverAndPurge(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	for _, e := range []*entry{{Tenant: "a", Key: "k", Hash: "h1"}, {Tenant: "b", Key: "k", Hash: "h2"}, {Tenant: "a", Key: "done", Hash: "h3"}} {
		e.Kind, e.State, e.Created = "run", "queued", old
		if _, created, err := st.begin(ctx, e); err != nil || !created {
			t.Fatalf("begin %+v: %v %v", e, created, err)
		}
	}
	if prev, created, err := st.begin(ctx, &entry{Tenant: "a", Key: "k", Hash: "other", Kind: "run", State: "queued", Created: old}); err != nil || created || prev.Hash != "h1" {
		t.Fatalf("second begin: %+v %v %v", prev, created, err)
	}
	st.update(ctx, "b", "k", "running", true, nil)
	st.update(ctx, "a", "done", "completed", true, []byte(`{"state":"completed"}`))
	if n, err := st.recover(ctx, time.Now()); err != nil || n != 2 {
		t.Fatalf("recover: %d %v", n, err)
	}
	if e, _ := st.get(ctx, "b", "k"); e.State != "lost" || !e.Started {
		t.Errorf("b/k after recover: %+v", e)
	}
	if e, _ := st.get(ctx, "a", "done"); e.State != "completed" {
		t.Errorf("a/done after recover: %+v", e)
	}
	if n, err := st.purge(ctx, time.Now().Add(time.Minute)); err != nil || n != 3 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, err := st.get(ctx, "a", "k"); err != errNoEntry {
		t.Errorf("purged entry: %v", err)
	}
}
