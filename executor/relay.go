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
// doubling intervals up to pickupMax). PostgreSQL only: a SQLite
// executor has no peers.

// toolReplyStore keeps tool answers in transit between executors.
type toolReplyStore interface {
	// putToolReply records reply for call id of the tenant's eval key,
	// unless maxRelayed answers for that key wait already: then false.
	putToolReply(ctx context.Context, tenant, key string, id uint64, reply string) (bool, error)
	// takeToolReply removes and returns the answer recorded for call id
	// of the tenant's eval key; false when there is none.
	takeToolReply(ctx context.Context, tenant, key string, id uint64) (string, bool, error)
}

// Our choices: an answer relayed through the store arrives within
// pickupMax of its recording once a call waited a while, and a call
// answered over its own connection (the common case) costs no lookup
// when answered within pickupFirst; at most maxRelayed answers wait per
// eval key (a tenant cannot fill the store through a running eval).
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
	reply   TEXT   NOT NULL,
	created BIGINT NOT NULL,
	PRIMARY KEY (tenant, key, id)
)`

func (s *pgStore) putToolReply(ctx context.Context, tenant, key string, id uint64, reply string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO glovebox_tool_replies (tenant, key, id, reply, created)
		SELECT $1, $2, $3, $4, $5
		WHERE (SELECT COUNT(*) FROM glovebox_tool_replies WHERE tenant = $1 AND key = $2) < $6
		ON CONFLICT (tenant, key, id) DO NOTHING`, tenant, key, int64(id), reply, time.Now().UnixNano(), maxRelayed)
	return err == nil && tag.RowsAffected() == 1, err
}

func (s *pgStore) takeToolReply(ctx context.Context, tenant, key string, id uint64) (string, bool, error) {
	var reply string
	err := s.pool.QueryRow(ctx, `DELETE FROM glovebox_tool_replies WHERE tenant = $1 AND key = $2 AND id = $3 RETURNING reply`,
		tenant, key, int64(id)).Scan(&reply)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return reply, err == nil, err
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
	if !ok || e.fleet == nil {
		return notFound
	}
	ent, err := e.s.store.get(ctx, t.Name, key)
	if errors.Is(err, errNoEntry) || err == nil && (ent.Kind != "eval" || wire.Final(ent.State)) {
		return notFound
	}
	if err != nil {
		return wire.Errorf(wire.CodeUnavailable, "store: %v; the answer was not recorded", err)
	}
	put, err := rs.putToolReply(ctx, t.Name, key, tr.ID, tr.Reply)
	if err != nil {
		return wire.Errorf(wire.CodeUnavailable, "store: %v; the answer was not recorded", err)
	}
	if !put {
		return wire.Errorf(wire.CodeQueueFull, "eval %s has %d answers waiting for the executor running it, the most allowed (or call %d's is there already)", key, maxRelayed, tr.ID)
	}
	return nil
}

// pickupFor is the evalRun's store lookup for the tenant's eval key, or
// nil when answers cannot arrive through the store.
func (e *evals) pickupFor(t *tenant, key string) func(id uint64) (string, bool) {
	rs, ok := e.s.store.(toolReplyStore)
	if !ok || e.fleet == nil {
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
