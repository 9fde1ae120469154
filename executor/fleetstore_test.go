package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestStateStoreContract: on both stores, a session's lease is held by
// one holder at a time (a live one blocks others until it saves,
// releases or runs out), a save bumps the version and frees the lease,
// a stale holder's save is refused, the state is returned only when the
// caller's version is not the stored one; a paused state is claimed
// once, by exactly one of many racing claimers.
func TestStateStoreContract(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() store) {
		ctx := context.Background()
		st := open().(stateStore)
		if err := st.initStates(ctx); err != nil {
			t.Fatal(err)
		}
		if err := st.initStates(ctx); err != nil {
			t.Fatalf("initStates twice: %v", err)
		}
		if err := st.createSession(ctx, &sessionRow{Tenant: "a", ID: "s-1", Tools: []string{"t"}, Limits: []byte("{}")}, 8); err != nil {
			t.Fatal(err)
		}
		far := time.Now().Add(time.Hour)
		if _, err := st.acquireSession(ctx, "b", "s-1", "h/1", far, -1); !errors.Is(err, errNoEntry) {
			t.Errorf("another tenant's session: %v, want errNoEntry", err)
		}
		row, err := st.acquireSession(ctx, "a", "s-1", st.holderID()+"/1", far, -1)
		if err != nil || row.Version != 0 || row.State != nil || len(row.Tools) != 1 {
			t.Fatalf("first acquire: %+v %v", row, err)
		}
		if _, err := st.acquireSession(ctx, "a", "s-1", st.holderID()+"/2", far, -1); !errors.Is(err, errSessionBusy) {
			t.Errorf("second holder while the first holds: %v, want errSessionBusy", err)
		}
		if _, err := st.saveSession(ctx, "a", "s-1", st.holderID()+"/2", 1, []byte("v1"), time.Now(), -1); !errors.Is(err, errLeaseLost) {
			t.Errorf("save by a non-holder: %v, want errLeaseLost", err)
		}
		if _, err := st.saveSession(ctx, "a", "s-1", st.holderID()+"/1", 1, []byte("v1"), time.Now(), -1); err != nil {
			t.Fatal(err)
		}
		row, err = st.acquireSession(ctx, "a", "s-1", st.holderID()+"/2", far, 0)
		if err != nil || row.Version != 1 || string(row.State) != "v1" {
			t.Fatalf("acquire after the save: %+v %v", row, err)
		}
		st.releaseSession(ctx, "a", "s-1", st.holderID()+"/2")
		row, err = st.acquireSession(ctx, "a", "s-1", st.holderID()+"/3", time.Now().Add(-time.Second), 1)
		if err != nil || row.State != nil {
			t.Fatalf("acquire at the cached version: %+v %v (want no state sent)", row, err)
		}
		// A lease past its until is free.
		if _, err := st.acquireSession(ctx, "a", "s-1", st.holderID()+"/4", far, 1); err != nil {
			t.Errorf("acquire over a lease that ran out: %v", err)
		}
		if n, err := st.countSessions(ctx, "a"); n != 1 || err != nil {
			t.Errorf("count: %d %v", n, err)
		}
		if ok, err := st.deleteSession(ctx, "a", "s-1"); !ok || err != nil {
			t.Errorf("delete: %v %v", ok, err)
		}
		if _, err := st.putPaused(ctx, "a", "e-1", &pausedRow{Limits: []byte("{}"), State: []byte("paused")}, -1); err != nil {
			t.Fatal(err)
		}
		// A peek reads without claiming.
		if p, err := st.peekPaused(ctx, "a", "e-1"); err != nil || string(p.State) != "paused" || p.ClaimedBy != "" {
			t.Fatalf("peek before the claim: %+v %v", p, err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, used := 0, 0
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := open().(stateStore).claimPaused(ctx, "a", "e-1", "c-"+string(rune('0'+i)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && string(p.State) == "paused":
					won++
				case errors.Is(err, errPausedUsed) && p.ClaimedBy != "":
					used++
				default:
					t.Errorf("claim: %+v %v", p, err)
				}
			}()
		}
		wg.Wait()
		if won != 1 || used != 7 {
			t.Errorf("8 racing claims: %d won, %d refused; want 1 and 7", won, used)
		}
		if _, err := st.claimPaused(ctx, "b", "e-1", "x"); !errors.Is(err, errNoEntry) {
			t.Errorf("another tenant's pause: %v", err)
		}
		if p, err := st.peekPaused(ctx, "a", "e-1"); !errors.Is(err, errPausedUsed) || p.ClaimedBy == "" {
			t.Errorf("peek after the claim: %+v %v", p, err)
		}
		if _, err := st.peekPaused(ctx, "b", "e-1"); !errors.Is(err, errNoEntry) {
			t.Errorf("peek of another tenant's pause: %v", err)
		}
		if bytes, err := st.stateBytes(ctx); err != nil || bytes["a"] != int64(len("paused")) {
			t.Errorf("state bytes: %v %v", bytes, err)
		}
	})
}

// TestSessionCapInStore: on both stores, creations racing past a
// tenant's cap (each on a connection of its own on PostgreSQL) leave
// exactly the cap made, the rest refused with the count; another
// tenant's sessions are not counted.
func TestSessionCapInStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() store) {
		ctx := context.Background()
		st := open().(stateStore)
		if err := st.initStates(ctx); err != nil {
			t.Fatal(err)
		}
		if err := st.createSession(ctx, &sessionRow{Tenant: "b", ID: "s-b", Limits: []byte("{}")}, 1); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		made, refused := 0, 0
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := st.createSession(ctx, &sessionRow{Tenant: "a", ID: fmt.Sprintf("s-%d", i), Limits: []byte("{}")}, 3)
				var ce *sessionCapError
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					made++
				case errors.As(err, &ce) && ce.Open == 3:
					refused++
				default:
					t.Errorf("creation %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if made != 3 || refused != 9 {
			t.Errorf("%d made, %d refused; want 3 and 9", made, refused)
		}
		if n, _ := st.countSessions(ctx, "a"); n != 3 {
			t.Errorf("%d sessions stored, want 3", n)
		}
	})
}

// TestStateQuotaInStore: on both stores, a state write is checked
// against the room it is given with the tenant's other states (sessions'
// and paused evals') counted in the same transaction: one that does not
// fit is refused and nothing is stored; saves of many sessions racing
// through separate handles (separate executors, on PostgreSQL) never
// hold more than the room together; another tenant's states are not
// counted; an empty state (a reset the client was told of) reads back
// empty, not absent; a session's own old state is not counted against
// its new one.
func TestStateQuotaInStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() store) {
		ctx := context.Background()
		st := open().(stateStore)
		if err := st.initStates(ctx); err != nil {
			t.Fatal(err)
		}
		const room, size, sessions = 10_000, 3_000, 8
		far := time.Now().Add(time.Hour)
		for i := range sessions {
			if err := st.createSession(ctx, &sessionRow{Tenant: "a", ID: fmt.Sprintf("s-%d", i), Limits: []byte("{}")}, 100); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.createSession(ctx, &sessionRow{Tenant: "b", ID: "s-b", Limits: []byte("{}")}, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := st.acquireSession(ctx, "b", "s-b", "h/b", far, -1); err != nil {
			t.Fatal(err)
		}
		if _, err := st.saveSession(ctx, "b", "s-b", "h/b", 1, make([]byte, 9_000), time.Now(), room); err != nil {
			t.Fatalf("another tenant's save: %v", err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		saved, over := 0, 0
		holders := map[string]string{}
		for i := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := st
				if _, one := st.(*sqliteStore); !one {
					h = open().(stateStore) // an executor of its own (SQLite: one per file)
				}
				id, holder := fmt.Sprintf("s-%d", i), h.holderID()+"/1"
				mu.Lock()
				holders[id] = holder
				mu.Unlock()
				if _, err := h.acquireSession(ctx, "a", id, holder, far, -1); err != nil {
					t.Error(err)
					return
				}
				held, err := h.saveSession(ctx, "a", id, holder, 1, make([]byte, size), time.Now(), room)
				var qe *stateQuotaError
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && held <= room:
					saved++
				case errors.As(err, &qe) && qe.Want == size && qe.Held+size > room:
					over++
				default:
					t.Errorf("save %d: held %d, %v", i, held, err)
				}
			}()
		}
		wg.Wait()
		if saved != room/size || over != sessions-room/size {
			t.Errorf("%d saved, %d refused; want %d and %d", saved, over, room/size, sessions-room/size)
		}
		if b, err := st.stateBytes(ctx); err != nil || b["a"] != int64(saved*size) || b["b"] != 9_000 {
			t.Errorf("state bytes: %v %v", b, err)
		}
		// A refused one still holds its lease: it stores a told reset.
		var reset, grown string
		for i := range sessions {
			id, holder := fmt.Sprintf("s-%d", i), holders[fmt.Sprintf("s-%d", i)]
			row, err := st.acquireSession(ctx, "a", id, st.holderID()+"/x", far, -1)
			if errors.Is(err, errSessionBusy) && reset == "" {
				reset = id
				if _, err := st.saveSession(ctx, "a", id, holder, 1, []byte{}, time.Now(), -1); err != nil {
					t.Fatal(err)
				}
			}
			if err == nil && row.Version == 1 && grown == "" {
				grown = id // its own old state is not counted against its next
				if _, err := st.saveSession(ctx, "a", id, st.holderID()+"/x", 2, make([]byte, size+500), time.Now(), room); err != nil {
					t.Errorf("a session growing within the room: %v", err)
				}
			} else if err == nil {
				st.releaseSession(ctx, "a", id, st.holderID()+"/x")
			}
		}
		row, err := st.acquireSession(ctx, "a", reset, st.holderID()+"/y", far, -1)
		if err != nil || row.Version != 1 || row.State == nil || len(row.State) != 0 {
			t.Errorf("a told reset reads back as %+v %v: want an empty, not absent, state", row, err)
		}
		// Paused evals' states count too, and are refused past the room.
		held, err := st.putPaused(ctx, "a", "e-1", &pausedRow{Limits: []byte("{}"), State: make([]byte, 100)}, room)
		if err != nil || held > room {
			t.Fatalf("a pause within the room: %d %v", held, err)
		}
		var qe *stateQuotaError
		if _, err := st.putPaused(ctx, "a", "e-2", &pausedRow{Limits: []byte("{}"), State: make([]byte, size)}, room); !errors.As(err, &qe) {
			t.Errorf("a pause past the room: %v", err)
		}
		if _, err := st.peekPaused(ctx, "a", "e-2"); !errors.Is(err, errNoEntry) {
			t.Errorf("the refused pause was stored: %v", err)
		}
		if err := st.deletePaused(ctx, "a", "e-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.peekPaused(ctx, "a", "e-1"); !errors.Is(err, errNoEntry) {
			t.Errorf("a deleted pause: %v", err)
		}
	})
}
