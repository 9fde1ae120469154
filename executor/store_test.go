package executor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// forEachStore runs f once per store implementation; open makes another
// handle on the same database (the next executor, or a peer).
func forEachStore(t *testing.T, f func(t *testing.T, open func() store)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s.db")
		f(t, func() store {
			st, err := openStore(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.close() })
			return st
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := startPostgres(t)
		f(t, func() store {
			st, err := openPgStore(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.close() })
			return st
		})
	})
}

// TestStoreRecoverAndPurge: begin is first-writer-wins per (tenant, key);
// the next executor's recover marks the unfinished entries of the one
// that stopped lost (started kept); purge drops only old final ones.
func TestStoreRecoverAndPurge(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() store) {
		st := open()
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
		if err := st.update(ctx, "b", "k", "running", true, nil); err != nil {
			t.Fatal(err)
		}
		if err := st.finish(ctx, "a", "done", "completed", true, []byte(`{"state":"completed"}`)); err != nil {
			t.Fatal(err)
		}
		if u, err := st.usage(ctx); err != nil || u["a"] != int64(len(`{"state":"completed"}`)) {
			t.Errorf("usage: %v %v", u, err)
		}
		st.close()
		st = open() // the next executor
		if n, err := st.recover(ctx, time.Now()); err != nil || n != 2 {
			t.Fatalf("recover: %d %v", n, err)
		}
		if e, _ := st.get(ctx, "b", "k"); e == nil || e.State != "lost" || !e.Started {
			t.Errorf("b/k after recover: %+v", e)
		}
		if e, _ := st.get(ctx, "a", "k"); e == nil || e.State != "lost" || e.Started {
			t.Errorf("a/k after recover: %+v", e)
		}
		if e, _ := st.get(ctx, "a", "done"); e == nil || e.State != "completed" {
			t.Errorf("a/done after recover: %+v", e)
		}
		if n, err := st.purge(ctx, time.Now().Add(time.Minute)); err != nil || n != 3 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if _, err := st.get(ctx, "a", "k"); err != errNoEntry {
			t.Errorf("purged entry: %v", err)
		}
		if err := st.probe(ctx); err != nil {
			t.Errorf("probe: %v", err)
		}
		if err := st.ping(ctx); err != nil {
			t.Errorf("ping: %v", err)
		}
	})
}

// TestStoreRace: two executors on one database racing to begin the same
// keys: each key is created exactly once, and the loser gets the
// winner's entry (the database's primary key decides).
func TestStoreRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() store) {
		a, b := open(), open()
		const keys = 50
		type res struct {
			created bool
			hash    string
			err     error
		}
		out := make(chan res, 2*keys)
		for i := range keys {
			for j, st := range []store{a, b} {
				go func() {
					h := fmt.Sprint("h", j)
					old, created, err := st.begin(context.Background(), &entry{Tenant: "t", Key: fmt.Sprint("k", i), Kind: "run", Hash: h, State: "running", Started: true, Created: time.Now()})
					if err == nil && !created {
						h = old.Hash
					}
					out <- res{created, fmt.Sprint(i, h), err}
				}()
			}
		}
		created, winners := 0, map[string]bool{}
		for range 2 * keys {
			r := <-out
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.created {
				created++
			}
			winners[r.hash] = true
		}
		if created != keys || len(winners) != keys {
			t.Errorf("%d created, %d distinct outcomes for %d keys raced by two executors: want %d and %d", created, len(winners), keys, keys, keys)
		}
	})
}

// TestPgStoreLivePeer: on a shared PostgreSQL an executor's recover
// leaves a live peer's running entries alone and marks them lost once
// the peer's lease has run out.
func TestPgStoreLivePeer(t *testing.T) {
	url := startPostgres(t)
	ctx := context.Background()
	a, err := openPgStore(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if _, _, err := a.begin(ctx, &entry{Tenant: "t", Key: "k", Kind: "run", Hash: "h", State: "running", Started: true, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	b, err := openPgStore(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if n, err := b.recover(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("recover beside a live peer: %d %v, want 0", n, err)
	}
	if e, _ := b.get(ctx, "t", "k"); e == nil || e.State != "running" {
		t.Fatalf("the live peer's entry: %+v", e)
	}
	if n, err := b.recover(ctx, time.Now().Add(pgLease+time.Second)); err != nil || n != 1 {
		t.Fatalf("recover after the peer's lease: %d %v, want 1", n, err)
	}
	if e, _ := b.get(ctx, "t", "k"); e == nil || e.State != "lost" || !e.Started {
		t.Errorf("the dead peer's entry: %+v", e)
	}
}

// holdWriter blocks st's writer inside a transaction until the returned
// function is called, which waits for that transaction's commit.
func holdWriter(t *testing.T, st *sqliteStore) (release func()) {
	entered, hold, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- st.write(true, func(wtx) error { close(entered); <-hold; return nil })
	}()
	<-entered
	return func() {
		close(hold)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
}

// queueBegins starts n begins (keys k0…) and waits until all are queued;
// their errors arrive on the returned channel.
func queueBegins(st *sqliteStore, n int, extra func() error) chan error {
	errs := make(chan error, n+1)
	for i := range n {
		go func() {
			_, created, err := st.begin(context.Background(), &entry{Tenant: "a", Key: fmt.Sprint("k", i), Kind: "eval", Hash: "h", State: "running", Created: time.Now()})
			if err == nil && !created {
				err = fmt.Errorf("k%d not created", i)
			}
			errs <- err
		}()
	}
	want := n
	if extra != nil {
		want++
		go func() { errs <- extra() }()
	}
	for st.queued() < want {
		runtime.Gosched()
	}
	return errs
}

// TestStoreGroupCommit: durable writes queued while a commit is under
// way share the next commit (one transaction, one fsync), and each is
// answered only after it, with the entry stored.
func TestStoreGroupCommit(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	release := holdWriter(t, st)
	const n = 50
	errs := queueBegins(st, n, nil)
	before := st.commits.Load()
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := st.commits.Load() - before; got != 2 {
		t.Errorf("%d commits for the held write and %d queued begins, want 2", got, n)
	}
	for i := range n {
		if e, err := st.get(context.Background(), "a", fmt.Sprint("k", i)); err != nil || e.State != "running" {
			t.Errorf("k%d: %+v %v", i, e, err)
		}
	}
}

// TestStoreGroupCommitFailsAlone: a write that fails inside a batch
// fails alone; its neighbours are committed.
func TestStoreGroupCommitFailsAlone(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	release := holdWriter(t, st)
	const n = 10
	bad := errors.New("this write fails")
	errs := queueBegins(st, n, func() error { return st.write(true, func(wtx) error { return bad }) })
	release()
	failed := 0
	for range n + 1 {
		if err := <-errs; errors.Is(err, bad) {
			failed++
		} else if err != nil {
			t.Error(err)
		}
	}
	if failed != 1 {
		t.Errorf("%d writes failed, want the one bad one", failed)
	}
	for i := range n {
		if e, err := st.get(context.Background(), "a", fmt.Sprint("k", i)); err != nil || e.State != "running" {
			t.Errorf("k%d: %+v %v", i, e, err)
		}
	}
	st.close()
	if err := st.probe(context.Background()); !errors.Is(err, errStoreClosed) {
		t.Errorf("write after close: %v, want errStoreClosed", err)
	}
}
