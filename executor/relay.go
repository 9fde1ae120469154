package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// Tool answers that reach another executor of a fleet than the one
// running the eval (behind a Service, a client's POST .../tool-results
// may land on any replica): the receiving executor records the answer in
// the shared store and sends word of it (a PostgreSQL NOTIFY on
// relayChannel, delivered with its commit); the running one, LISTENing
// on a connection of its own, takes the answer as soon as the word
// arrives. Word can be lost (the listening connection drops, or is not
// yet open), so a waiting call also looks in the store by itself,
// pickupFirst after the call went out, then at doubling intervals up to
// pickupMax. PostgreSQL only (with or without --state-key): a SQLite
// executor has no peers.

// toolReplyStore keeps tool answers in transit between executors.
type toolReplyStore interface {
	// initToolReplies makes the table (once per process, before use).
	initToolReplies(ctx context.Context) error
	// expireToolReplies deletes answers recorded before old, and those
	// of evals no longer queued or running.
	expireToolReplies(ctx context.Context, old time.Time) (int, error)
	// putToolReply records reply for call id of the tenant's eval key,
	// unless maxRelayed answers for that key, or perTenant for the
	// tenant's unfinished evals, wait already, or one for the call
	// does: then false, with dup true in the last case. Answers for
	// the tenant's evals that ended are dropped first.
	putToolReply(ctx context.Context, tenant, key string, id uint64, reply string, perTenant int) (put, dup bool, err error)
	// takeToolReply removes and returns the answer recorded for call id
	// of the tenant's eval key; false when there is none.
	takeToolReply(ctx context.Context, tenant, key string, id uint64) (string, bool, error)
	// listenToolReplies calls wake with the relayTopic of each answer
	// recorded from now on, by any executor, and with "" each time it
	// (re)connects (word sent meanwhile was lost), until ctx ends.
	listenToolReplies(ctx context.Context, wake func(topic string))
}

// Our choices: when its word is lost, an answer relayed through the
// store still arrives within pickupMax of its recording once a call
// waited a while, and a call answered over its own connection (the
// common case) costs no lookup when answered within pickupFirst; at most
// maxRelayed answers wait per eval key, and maxRelayed times its
// MaxConcurrentRuns per tenant (a tenant cannot fill the store through
// its evals: answers no call took are dropped once their eval ends, at
// the tenant's next relayed answer or the next janitor's sweep,
// expireToolReplies). Variables, not constants, so that a test can turn
// the polling off and see the word alone carry the answer.
var (
	pickupFirst = 50 * time.Millisecond
	pickupMax   = time.Second
)

const maxRelayed = 16

// relayChannel is the PostgreSQL notification channel of recorded
// answers; a notification's payload is the answer's relayTopic.
const relayChannel = "glovebox_tool_replies"

// relayTopic names the tenant's eval key in a notification: 32 hex
// digits of a SHA-256 (a payload is text without NUL bytes, and need not
// say whose eval it is).
func relayTopic(tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return hex.EncodeToString(sum[:16])
}

const pgToolReplies = `
CREATE TABLE IF NOT EXISTS glovebox_tool_replies (
	tenant  TEXT   NOT NULL,
	key     TEXT   NOT NULL,
	id      BIGINT NOT NULL,
	reply   BYTEA  NOT NULL, -- not TEXT: an answer may hold NUL bytes
	created BIGINT NOT NULL,
	PRIMARY KEY (tenant, key, id)
)`

// pgRelayLock is the first key of the advisory locks that serialize one
// tenant's relayed answers (the second is a hash of the tenant), so
// racing answers through several executors never pass the bounds.
const pgRelayLock = 0x676c7472 // "gltr"

func (s *pgStore) initToolReplies(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgSchemaLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgToolReplies)
		return err
	})
}

func (s *pgStore) putToolReply(ctx context.Context, tenant, key string, id uint64, reply string, perTenant int) (put, dup bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(pgRelayLock), tenant); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM glovebox_tool_replies r WHERE r.tenant = $1 AND NOT EXISTS (
			SELECT 1 FROM glovebox_jobs j WHERE j.tenant = r.tenant AND j.key = r.key AND j.state IN ('queued', 'running'))`, tenant); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO glovebox_tool_replies (tenant, key, id, reply, created)
			SELECT $1, $2, $3, $4, $5
			WHERE (SELECT COUNT(*) FROM glovebox_tool_replies WHERE tenant = $1 AND key = $2) < $6
			AND (SELECT COUNT(*) FROM glovebox_tool_replies WHERE tenant = $1) < $7
			ON CONFLICT (tenant, key, id) DO NOTHING`, tenant, key, int64(id), []byte(reply), time.Now().UnixNano(), maxRelayed, perTenant)
		put = err == nil && tag.RowsAffected() == 1
		if put {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, relayChannel, relayTopic(tenant, key))
		} else if err == nil {
			// Refused: say whether for a bound or for the call's own
			// earlier answer (the refusal reads differently to a client).
			err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM glovebox_tool_replies WHERE tenant = $1 AND key = $2 AND id = $3)`,
				tenant, key, int64(id)).Scan(&dup)
		}
		return err
	})
	return put && err == nil, dup && err == nil, err
}

// listenToolReplies LISTENs on a connection of its own (not the pool's,
// whose connections it would take one of for good), reconnecting a
// second after it drops (a PostgreSQL restart, say).
func (s *pgStore) listenToolReplies(ctx context.Context, wake func(string)) {
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, s.listen)
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+relayChannel); err == nil {
				wake("")
				for {
					n, err := conn.WaitForNotification(ctx)
					if err != nil {
						break
					}
					wake(n.Payload)
				}
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(cctx)
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *pgStore) takeToolReply(ctx context.Context, tenant, key string, id uint64) (string, bool, error) {
	var reply []byte
	err := s.pool.QueryRow(ctx, `DELETE FROM glovebox_tool_replies WHERE tenant = $1 AND key = $2 AND id = $3 RETURNING reply`,
		tenant, key, int64(id)).Scan(&reply)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return string(reply), err == nil, err
}

// expireToolReplies deletes answers no call will take: those of evals
// that ended (or were never recorded), and any recorded before old. Run
// by every executor's janitor (every 30 s at most), it bounds how long a
// tenant's answers to calls its eval never made outlive the eval: the
// deletion at the tenant's next relayed answer alone left them, up to
// 16 × max_concurrent_runs answers of a request's size each, for the
// retention (24 h) when no next answer came.
func (s *pgStore) expireToolReplies(ctx context.Context, old time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM glovebox_tool_replies r WHERE r.created < $1 OR NOT EXISTS (
		SELECT 1 FROM glovebox_jobs j WHERE j.tenant = r.tenant AND j.key = r.key AND j.state IN ('queued', 'running'))`, old.UnixNano())
	return int(tag.RowsAffected()), err
}

// relayToolResult records tr for the tenant's eval key when that eval
// runs on another executor sharing the store; nil when it did, else the
// refusal to send (not_found when no eval of the key runs anywhere).
func (e *evals) relayToolResult(ctx context.Context, t *tenant, key string, tr *wire.ToolResult) *wire.Error {
	notFound := wire.Errorf(wire.CodeNotFound, "eval %s has no tool call %d waiting (answered already, ended, or another tenant's)", key, tr.ID)
	rs, ok := e.s.store.(toolReplyStore)
	if !ok {
		return notFound
	}
	ent, err := e.s.store.get(ctx, t.Name, key)
	if errors.Is(err, errNoEntry) || err == nil && (ent.Kind != "eval" || wire.Final(ent.State)) {
		return notFound
	}
	if err != nil {
		return wire.Errorf(wire.CodeUnavailable, "store: %v; the answer was not recorded", err)
	}
	perTenant := maxRelayed * max(1, t.MaxConcurrentRuns)
	put, dup, err := rs.putToolReply(ctx, t.Name, key, tr.ID, tr.Reply, perTenant)
	switch {
	case err != nil:
		return wire.Errorf(wire.CodeUnavailable, "store: %v; the answer was not recorded", err)
	case dup:
		return wire.Errorf(wire.CodeQueueFull, "eval %s's call %d has an answer recorded already, waiting for the executor running the eval (the first answer wins); this one was not recorded", key, tr.ID)
	case !put:
		return wire.Errorf(wire.CodeQueueFull, "eval %s has %d answers waiting for the executor running it, or tenant %s's evals %d, the most allowed; this one was not recorded",
			key, maxRelayed, t.Name, perTenant)
	}
	return nil
}

// relayWaits are the calls waiting for answers through the store, by
// relayTopic: each has a channel (buffered 1) that wake signals.
type relayWaits struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]bool
}

// add subscribes a call to topic's word until stop.
func (w *relayWaits) add(topic string) (ch chan struct{}, stop func()) {
	ch = make(chan struct{}, 1)
	w.mu.Lock()
	if w.m == nil {
		w.m = map[string]map[chan struct{}]bool{}
	}
	if w.m[topic] == nil {
		w.m[topic] = map[chan struct{}]bool{}
	}
	w.m[topic][ch] = true
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.m[topic], ch)
		if len(w.m[topic]) == 0 {
			delete(w.m, topic)
		}
		w.mu.Unlock()
	}
}

// wake signals the calls waiting on topic; "" signals every call.
// Word for one topic touches that topic's calls only: every answer
// relayed by any executor of the fleet reaches every executor, so a
// walk over all waiting topics per word would cost each executor its
// waiting calls times the fleet's relayed answers.
func (w *relayWaits) wake(topic string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	signal := func(chs map[chan struct{}]bool) {
		for ch := range chs {
			select {
			case ch <- struct{}{}:
			default: // signalled already
			}
		}
	}
	if topic != "" {
		signal(w.m[topic])
		return
	}
	for _, chs := range w.m {
		signal(chs)
	}
}

// wakeFor is the evalRun's subscription to word of answers recorded for
// the tenant's eval key, or nil when answers cannot arrive through the
// store.
func (e *evals) wakeFor(t *tenant, key string) func() (<-chan struct{}, func()) {
	if _, ok := e.s.store.(toolReplyStore); !ok {
		return nil
	}
	topic := relayTopic(t.Name, key)
	return func() (<-chan struct{}, func()) {
		ch, stop := e.waits.add(topic)
		return ch, stop
	}
}

// pickupFor is the evalRun's store lookup for the tenant's eval key, or
// nil when answers cannot arrive through the store.
func (e *evals) pickupFor(t *tenant, key string) func(id uint64) (string, bool) {
	rs, ok := e.s.store.(toolReplyStore)
	if !ok {
		return nil
	}
	return func(id uint64) (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rep, ok, err := rs.takeToolReply(ctx, t.Name, key, id)
		if err != nil {
			e.s.log.Warn("looking for a relayed tool answer failed", "tenant", t.Name, "key", key, "err", err)
		}
		return rep, ok
	}
}

// expireRelayed deletes the relayed answers no call will take: their
// eval ended, or they are older than the retention (expireToolReplies;
// fleetJanitor does it, with --state-key).
func (e *evals) expireRelayed(now time.Time) {
	rs, ok := e.s.store.(toolReplyStore)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(e.s.base, 30*time.Second)
	defer cancel()
	if _, err := rs.expireToolReplies(ctx, now.Add(-e.s.cfg.Retention)); err != nil {
		e.s.log.Error("expiring relayed tool answers failed", "err", err)
	}
}
