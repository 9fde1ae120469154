package executor

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// Tool answers that reach another executor of a fleet than the one
// running the eval (behind a Service, a client's POST .../tool-results
// may land on any replica): the receiving executor records the answer in
// the shared store, and the running one, while a call of its waits,
// looks for one there (pickupFirst after the call went out, then at
// doubling intervals up to pickupMax). PostgreSQL only (with or without
// --state-key): a SQLite executor has no peers.

// toolReplyStore keeps tool answers in transit between executors.
type toolReplyStore interface {
	// initToolReplies makes the table (once per process, before use).
	initToolReplies(ctx context.Context) error
	// expireToolReplies deletes answers recorded before old.
	expireToolReplies(ctx context.Context, old time.Time) (int, error)
	// putToolReply records reply for call id of the tenant's eval key,
	// unless maxRelayed answers for that key, or perTenant for the
	// tenant's unfinished evals, wait already: then false. Answers for
	// the tenant's evals that ended are dropped first.
	putToolReply(ctx context.Context, tenant, key string, id uint64, reply string, perTenant int) (bool, error)
	// takeToolReply removes and returns the answer recorded for call id
	// of the tenant's eval key; false when there is none.
	takeToolReply(ctx context.Context, tenant, key string, id uint64) (string, bool, error)
}

// Our choices: an answer relayed through the store arrives within
// pickupMax of its recording once a call waited a while, and a call
// answered over its own connection (the common case) costs no lookup
// when answered within pickupFirst; at most maxRelayed answers wait per
// eval key, and maxRelayed times its MaxConcurrentRuns per tenant (a
// tenant cannot fill the store through its evals: answers no call took
// are dropped once their eval ends, at the tenant's next relayed answer,
// else at the retention).
const (
	pickupFirst = 50 * time.Millisecond
	pickupMax   = time.Second
	maxRelayed  = 16
)

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

func (s *pgStore) putToolReply(ctx context.Context, tenant, key string, id uint64, reply string, perTenant int) (put bool, err error) {
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
		return err
	})
	return put, err
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

// expireToolReplies deletes answers recorded before old (their eval
// ended without taking them).
func (s *pgStore) expireToolReplies(ctx context.Context, old time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM glovebox_tool_replies WHERE created < $1`, old.UnixNano())
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
	put, err := rs.putToolReply(ctx, t.Name, key, tr.ID, tr.Reply, perTenant)
	if err != nil {
		return wire.Errorf(wire.CodeUnavailable, "store: %v; the answer was not recorded", err)
	}
	if !put {
		return wire.Errorf(wire.CodeQueueFull, "eval %s has %d answers waiting for the executor running it, or tenant %s's evals %d, the most allowed (or call %d's is there already)",
			key, maxRelayed, t.Name, perTenant, tr.ID)
	}
	return nil
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

// expireRelayed deletes the relayed answers older than the retention
// (fleetJanitor does, with --state-key).
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
