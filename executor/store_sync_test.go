package executor

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// holdSync makes st's next fsyncs of its WAL wait: it returns a channel
// that receives once per fsync started, and release, which lets the
// waiting and every later fsync end with err.
func holdSync(st *sqliteStore, err error) (started chan struct{}, release func()) {
	started, gate := make(chan struct{}, 64), make(chan struct{})
	real := st.fsync
	st.fsync = func() error {
		started <- struct{}{}
		<-gate
		if err != nil {
			return err
		}
		return real()
	}
	return started, func() { close(gate) }
}

func beginKey(st *sqliteStore, key string) chan error {
	done := make(chan error, 1)
	go func() {
		_, _, err := st.begin(context.Background(), &entry{Tenant: "a", Key: key, Kind: "eval", Hash: "h", State: "running", Started: true, Created: time.Now()})
		done <- err
	}()
	return done
}

// TestStoreFinishSkipsTheDisk: while a durable write waits for its
// fsync, the writer commits on: a final record (finish) is answered at
// its commit, without waiting for that fsync or any other; durable
// writes committed meanwhile share the next fsync, and each is answered
// only after an fsync that started after its commit.
func TestStoreFinishSkipsTheDisk(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	started, release := holdSync(st, nil)
	first := beginKey(st, "k0")
	<-started // k0 is committed; its fsync is held
	select {
	case err := <-first:
		t.Fatalf("begin returned (%v) before its fsync ended", err)
	default:
	}
	// The writer is free: a final record commits and is answered now.
	if err := st.finish(context.Background(), "a", "k0", "completed", true, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if e, err := st.get(context.Background(), "a", "k0"); err != nil || e.State != "completed" {
		t.Fatalf("k0 after finish: %+v %v", e, err)
	}
	// Durable writes committed during the held fsync wait for the next.
	var later []chan error
	for _, k := range []string{"k1", "k2", "k3"} {
		later = append(later, beginKey(st, k))
	}
	for st.commits.Load() < 3 { // k0, the finish, and at least one more
		time.Sleep(time.Millisecond)
	}
	syncs := st.syncs.Load()
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for _, c := range later {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if got := st.syncs.Load() - syncs; got < 2 || got > 4 {
		t.Errorf("%d fsyncs for k0 and three begins committed during its fsync, want 2 to 4 (one covers many)", got)
	}
}

// TestStoreFailedSyncIsSticky: a failed fsync fails the durable writes
// that waited for it and every later one (the kernel may have dropped
// the pages it could not write, so no later fsync proves them on disk);
// the store reports it until the executor restarts.
func TestStoreFailedSyncIsSticky(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	bad := errors.New("EIO")
	started, release := holdSync(st, bad)
	first := beginKey(st, "k0")
	<-started
	release()
	if err := <-first; !errors.Is(err, bad) {
		t.Fatalf("begin under a failed fsync: %v, want it", err)
	}
	st.fsync = func() error { return nil }
	if err := <-beginKey(st, "k1"); !errors.Is(err, bad) {
		t.Errorf("a begin after a failed fsync: %v, want the failure again", err)
	}
	if err := st.probe(context.Background()); !errors.Is(err, bad) {
		t.Errorf("probe after a failed fsync: %v, want the failure again", err)
	}
}

// TestStoreQueuedBeginSkipsTheDisk: the begin of a queued entry is
// answered at its commit, while an fsync is held; its update to running
// waits for an fsync, as the job starts only after it.
func TestStoreQueuedBeginSkipsTheDisk(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	started, hold := holdSync(st, nil)
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release()
	ctx := context.Background()
	if _, created, err := st.begin(ctx, &entry{Tenant: "a", Key: "q", Kind: "eval", Hash: "h", State: "queued", Created: time.Now()}); err != nil || !created {
		t.Fatalf("queued begin: %v, created %v", err, created)
	}
	if e, err := st.get(ctx, "a", "q"); err != nil || e.State != "queued" {
		t.Fatalf("after the queued begin: %+v, %v", e, err)
	}
	done := make(chan error, 1)
	go func() { done <- st.update(ctx, "a", "q", "running", true, nil) }()
	<-started
	select {
	case err := <-done:
		t.Fatalf("update to running returned (%v) before its fsync ended", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
