package executor

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// stateStore keeps what lets any executor sharing the store serve a
// session's next eval or a paused eval's answer: each session's sealed
// state with a version and a lease, and each paused eval's sealed state
// with who continued it. Both stores implement it (sessions then survive
// a restart of a single SQLite executor too); fleet.go uses it.
type stateStore interface {
	// initStates makes the tables (once per process, before use).
	initStates(ctx context.Context) error
	// holderID names this process in leases: a lease whose holder
	// starts with a process the store knows is dead (a PostgreSQL
	// executor whose heartbeat ran out, pgLease; any earlier process of
	// a lone SQLite executor) is free, whatever its until.
	holderID() string
	// createSession records a new session (version 0, no state, free),
	// unless the tenant has max sessions stored already, fleet-wide:
	// then a *sessionCapError. The count and the insert are one
	// transaction, serialized per tenant, so racing creations through
	// any executors never pass max together.
	createSession(ctx context.Context, r *sessionRow, max int) error
	// acquireSession takes the session's lease for holder until until,
	// if no live lease is held; it returns the row, with State only when
	// the stored version is not have. Errors: errNoEntry, errSessionBusy.
	acquireSession(ctx context.Context, tenant, id, holder string, until time.Time, have int64) (*sessionRow, error)
	// saveSession stores version (the held one plus 1) and its state,
	// and frees the lease, durably; the session counts as used at used
	// (later than now for a paused one: expireStates keeps it while its
	// pause waits). room is the most bytes of states (sessions' and
	// paused evals') the tenant may keep once it is stored (negative: no
	// bound): the tenant's other states and this one are counted in the
	// same transaction, serialized per tenant fleet-wide, and a state
	// that does not fit is not stored (a *stateQuotaError; the lease is
	// still held). held is the tenant's state bytes after the write, or
	// -1 when room is negative (not counted). errLeaseLost when holder
	// no longer holds it (it ran out and another executor took the
	// session).
	saveSession(ctx context.Context, tenant, id, holder string, version int64, state []byte, used time.Time, room int64) (held int64, err error)
	// releaseSession frees holder's lease, leaving the state.
	releaseSession(ctx context.Context, tenant, id, holder string) error
	// deleteSession removes a session; false when there was none.
	deleteSession(ctx context.Context, tenant, id string) (bool, error)
	// countSessions is the tenant's sessions, fleet-wide.
	countSessions(ctx context.Context, tenant string) (int, error)
	// expireSessions deletes the sessions unused since before that hold
	// no live lease, and the paused states made before old.
	expireStates(ctx context.Context, before, old time.Time) (int, error)
	// putPaused records a paused eval's state under its key, durably,
	// unless it does not fit in room (as saveSession's: a
	// *stateQuotaError, nothing stored); held as saveSession's.
	putPaused(ctx context.Context, tenant, key string, p *pausedRow, room int64) (held int64, err error)
	// deletePaused removes the pause recorded under key if no continue
	// claimed it (a session's pause whose state was then not stored).
	deletePaused(ctx context.Context, tenant, key string) error
	// claimPaused marks the paused state under key continued by by,
	// durably, and returns it: once; errPausedUsed (with the claimer in
	// the row) after, errNoEntry when there is none.
	claimPaused(ctx context.Context, tenant, key, by string) (*pausedRow, error)
	// peekPaused returns the paused state under key without claiming it,
	// so that it can be checked first: errPausedUsed (with the claimer
	// in the row) when it was claimed, errNoEntry when there is none.
	peekPaused(ctx context.Context, tenant, key string) (*pausedRow, error)
	// stateBytes is the bytes of session and paused states per tenant.
	stateBytes(ctx context.Context) (map[string]int64, error)
}

// sessionRow is one stored session.
type sessionRow struct {
	Tenant, ID string
	Tools      []string
	Limits     []byte // JSON of wire.EvalLimits
	Version    int64
	State      []byte // sealed; nil for a session that never ran (or was reset)
}

// pausedRow is one stored paused eval.
type pausedRow struct {
	Tools     []string
	Limits    []byte
	State     []byte
	ClaimedBy string
}

// stateQuotaError is saveSession's and putPaused's refusal of a state of
// Want bytes when the tenant's other states hold Held and Room is the
// most they may hold with it.
type stateQuotaError struct{ Held, Want, Room int64 }

func (e *stateQuotaError) Error() string {
	return fmt.Sprintf("executor: a state of %d bytes does not fit: the tenant's other sessions' and paused evals' states hold %d, and its max_stored_bytes leaves them %d with its records", e.Want, e.Held, e.Room)
}

// fitState is the tenant's state bytes once a state of want bytes joins
// its others, or a *stateQuotaError when they would pass room.
func fitState(others int64, want int, room int64) (int64, error) {
	if others+int64(want) > room {
		return -1, &stateQuotaError{Held: others, Want: int64(want), Room: room}
	}
	return others + int64(want), nil
}

// sessionCapError is createSession's refusal: the tenant has Open
// sessions stored, its most.
type sessionCapError struct{ Open int }

func (e *sessionCapError) Error() string {
	return fmt.Sprintf("executor: the tenant has %d sessions open, the most allowed", e.Open)
}

var (
	errSessionBusy = errors.New("executor: the session is busy on another eval")
	errLeaseLost   = errors.New("executor: the session's lease ran out")
	errPausedUsed  = errors.New("executor: the paused eval was continued before")
)

func toolsJSON(t []string) string {
	if t == nil {
		t = []string{}
	}
	b, _ := json.Marshal(t)
	return string(b)
}

func parseTools(s string) []string {
	var t []string
	json.Unmarshal([]byte(s), &t)
	return t
}

// SQLite.

const sqliteStates = `
CREATE TABLE IF NOT EXISTS sessions (
	tenant  TEXT NOT NULL,
	id      TEXT NOT NULL,
	tools   TEXT NOT NULL,
	limits  BLOB NOT NULL,
	version INTEGER NOT NULL DEFAULT 0,
	state   BLOB,
	holder  TEXT NOT NULL DEFAULT '',
	until   INTEGER NOT NULL DEFAULT 0,
	used    INTEGER NOT NULL,
	PRIMARY KEY (tenant, id)
);
CREATE TABLE IF NOT EXISTS paused (
	tenant  TEXT NOT NULL,
	key     TEXT NOT NULL,
	tools   TEXT NOT NULL,
	limits  BLOB NOT NULL,
	state   BLOB NOT NULL,
	claimed TEXT NOT NULL DEFAULT '',
	created INTEGER NOT NULL,
	PRIMARY KEY (tenant, key)
)`

func (s *sqliteStore) initStates(ctx context.Context) error {
	return s.write(true, func(tx wtx) error {
		if _, err := tx.Exec(sqliteStates); err != nil {
			return err
		}
		// One executor per file: leases of earlier processes are void.
		_, err := tx.Exec(`UPDATE sessions SET holder = '', until = 0 WHERE holder <> ''`)
		return err
	})
}

// holderID: one process per file, so any id will do.
func (s *sqliteStore) holderID() string { return "sqlite" }

func (s *sqliteStore) createSession(ctx context.Context, r *sessionRow, max int) error {
	return s.write(true, func(tx wtx) error {
		// One writer: the count and the insert are not interleaved.
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM sessions WHERE tenant = ?`, r.Tenant).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return &sessionCapError{Open: n}
		}
		_, err := tx.Exec(`INSERT INTO sessions (tenant, id, tools, limits, used) VALUES (?, ?, ?, ?, ?)`,
			r.Tenant, r.ID, toolsJSON(r.Tools), r.Limits, time.Now().UnixNano())
		return err
	})
}

func (s *sqliteStore) acquireSession(ctx context.Context, tenant, id, holder string, until time.Time, have int64) (row *sessionRow, err error) {
	err = s.write(true, func(tx wtx) error {
		now := time.Now().UnixNano()
		res, err := tx.Exec(`UPDATE sessions SET holder = ?, until = ?, used = MAX(used, ?) WHERE tenant = ? AND id = ? AND (holder = '' OR until < ? OR holder = ?)`,
			holder, until.UnixNano(), now, tenant, id, now, holder)
		if err != nil {
			return err
		}
		row = &sessionRow{Tenant: tenant, ID: id}
		var tools string
		var state []byte
		var none bool
		err = tx.QueryRow(`SELECT tools, limits, version, state, state IS NULL FROM sessions WHERE tenant = ? AND id = ?`, tenant, id).Scan(&tools, &row.Limits, &row.Version, &state, &none)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoEntry
		}
		if err != nil {
			return err
		}
		if affected(res) == 0 {
			return errSessionBusy
		}
		row.Tools = parseTools(tools)
		if row.Version != have {
			row.State = state
			if !none && state == nil { // the driver reads an empty blob as nil
				row.State = []byte{}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return row, nil
}

func (s *sqliteStore) saveSession(ctx context.Context, tenant, id, holder string, version int64, state []byte, used time.Time, room int64) (held int64, err error) {
	held = -1
	err = s.write(true, func(tx wtx) error {
		if room >= 0 { // one writer: the count and the update are not interleaved
			others, err := sqliteStatesHeld(tx, tenant, id)
			if err == nil {
				held, err = fitState(others, len(state), room)
			}
			if err != nil {
				return err
			}
		}
		res, err := tx.Exec(`UPDATE sessions SET version = ?, state = ?, holder = '', until = 0, used = ? WHERE tenant = ? AND id = ? AND holder = ? AND version = ?`,
			version, state, used.UnixNano(), tenant, id, holder, version-1)
		if err == nil && affected(res) == 0 {
			err = errLeaseLost
		}
		return err
	})
	return held, err
}

// sqliteStatesHeld is the bytes of the tenant's states but session
// except's (sessions' and paused evals'), read in tx.
func sqliteStatesHeld(tx wtx, tenant, except string) (n int64, err error) {
	err = tx.QueryRow(`SELECT COALESCE((SELECT SUM(LENGTH(state)) FROM sessions WHERE tenant = ? AND id <> ?), 0)
		+ COALESCE((SELECT SUM(LENGTH(state)) FROM paused WHERE tenant = ?), 0)`, tenant, except, tenant).Scan(&n)
	return n, err
}

func (s *sqliteStore) releaseSession(ctx context.Context, tenant, id, holder string) error {
	return s.write(true, func(tx wtx) error {
		_, err := tx.Exec(`UPDATE sessions SET holder = '', until = 0 WHERE tenant = ? AND id = ? AND holder = ?`, tenant, id, holder)
		return err
	})
}

func (s *sqliteStore) deleteSession(ctx context.Context, tenant, id string) (ok bool, err error) {
	err = s.write(true, func(tx wtx) error {
		res, err := tx.Exec(`DELETE FROM sessions WHERE tenant = ? AND id = ?`, tenant, id)
		ok = err == nil && affected(res) == 1
		return err
	})
	return ok, err
}

func (s *sqliteStore) countSessions(ctx context.Context, tenant string) (n int, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions WHERE tenant = ?`, tenant).Scan(&n)
	return n, err
}

func (s *sqliteStore) expireStates(ctx context.Context, before, old time.Time) (n int, err error) {
	err = s.write(true, func(tx wtx) error {
		now := time.Now().UnixNano()
		res, err := tx.Exec(`DELETE FROM sessions WHERE used < ? AND (holder = '' OR until < ?)`, before.UnixNano(), now)
		if err != nil {
			return err
		}
		n = affected(res)
		res, err = tx.Exec(`DELETE FROM paused WHERE created < ?`, old.UnixNano())
		if err == nil {
			n += affected(res)
		}
		return err
	})
	return n, err
}

func (s *sqliteStore) putPaused(ctx context.Context, tenant, key string, p *pausedRow, room int64) (held int64, err error) {
	held = -1
	err = s.write(true, func(tx wtx) error {
		if room >= 0 {
			others, err := sqliteStatesHeld(tx, tenant, "")
			if err == nil {
				held, err = fitState(others, len(p.State), room)
			}
			if err != nil {
				return err
			}
		}
		_, err := tx.Exec(`INSERT INTO paused (tenant, key, tools, limits, state, created) VALUES (?, ?, ?, ?, ?, ?)`,
			tenant, key, toolsJSON(p.Tools), p.Limits, p.State, time.Now().UnixNano())
		return err
	})
	return held, err
}

func (s *sqliteStore) deletePaused(ctx context.Context, tenant, key string) error {
	return s.write(true, func(tx wtx) error {
		_, err := tx.Exec(`DELETE FROM paused WHERE tenant = ? AND key = ? AND claimed = ''`, tenant, key)
		return err
	})
}

func (s *sqliteStore) claimPaused(ctx context.Context, tenant, key, by string) (p *pausedRow, err error) {
	err = s.write(true, func(tx wtx) error {
		res, err := tx.Exec(`UPDATE paused SET claimed = ? WHERE tenant = ? AND key = ? AND claimed = ''`, by, tenant, key)
		if err != nil {
			return err
		}
		p = &pausedRow{}
		var tools string
		err = tx.QueryRow(`SELECT tools, limits, state, claimed FROM paused WHERE tenant = ? AND key = ?`, tenant, key).Scan(&tools, &p.Limits, &p.State, &p.ClaimedBy)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoEntry
		}
		if err != nil {
			return err
		}
		p.Tools = parseTools(tools)
		if affected(res) == 0 {
			return errPausedUsed
		}
		return nil
	})
	if errors.Is(err, errPausedUsed) {
		return p, err
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (s *sqliteStore) peekPaused(ctx context.Context, tenant, key string) (*pausedRow, error) {
	p := &pausedRow{}
	var tools string
	err := s.r.QueryRowContext(ctx, `SELECT tools, limits, state, claimed FROM paused WHERE tenant = ? AND key = ?`, tenant, key).Scan(&tools, &p.Limits, &p.State, &p.ClaimedBy)
	return peeked(p, tools, errors.Is(err, sql.ErrNoRows), err)
}

// peeked is peekPaused's answer for the row p read (tools unparsed):
// errNoEntry when none was found, errPausedUsed when it is claimed.
func peeked(p *pausedRow, tools string, none bool, err error) (*pausedRow, error) {
	switch {
	case none:
		return nil, errNoEntry
	case err != nil:
		return nil, err
	}
	p.Tools = parseTools(tools)
	if p.ClaimedBy != "" {
		return p, errPausedUsed
	}
	return p, nil
}

func (s *sqliteStore) stateBytes(ctx context.Context) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tenant, SUM(n) FROM (
		SELECT tenant, COALESCE(LENGTH(state), 0) AS n FROM sessions UNION ALL SELECT tenant, LENGTH(state) FROM paused) GROUP BY tenant`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return tenantBytes(rows)
}

// PostgreSQL.

const pgStates = `
CREATE TABLE IF NOT EXISTS glovebox_sessions (
	tenant  TEXT   NOT NULL,
	id      TEXT   NOT NULL,
	tools   TEXT   NOT NULL,
	limits  BYTEA  NOT NULL,
	version BIGINT NOT NULL DEFAULT 0,
	state   BYTEA,
	holder  TEXT   NOT NULL DEFAULT '',
	until   BIGINT NOT NULL DEFAULT 0,
	used    BIGINT NOT NULL,
	PRIMARY KEY (tenant, id)
);
CREATE TABLE IF NOT EXISTS glovebox_paused (
	tenant  TEXT   NOT NULL,
	key     TEXT   NOT NULL,
	tools   TEXT   NOT NULL,
	limits  BYTEA  NOT NULL,
	state   BYTEA  NOT NULL,
	claimed TEXT   NOT NULL DEFAULT '',
	created BIGINT NOT NULL,
	PRIMARY KEY (tenant, key)
)`

func (s *pgStore) initStates(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgSchemaLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgStates)
		return err
	})
}

func (s *pgStore) holderID() string { return s.owner }

// pgSessionLock is the first key of the advisory locks that serialize
// one tenant's session creations (the second is a hash of the tenant).
const pgSessionLock = 0x676c7373 // "glss"

func (s *pgStore) createSession(ctx context.Context, r *sessionRow, max int) error {
	return pgRetry(ctx, pgRetryBegin, func(ctx context.Context, retried bool) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.createSession1(ctx, tx, r, max, retried) })
	})
}

// createSession1 is one attempt of createSession in tx; retried: an
// attempt before may have made the session (its ID is new: a row under
// it is that attempt's).
func (s *pgStore) createSession1(ctx context.Context, tx pgx.Tx, r *sessionRow, max int, retried bool) error {
	if retried {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM glovebox_sessions WHERE tenant = $1 AND id = $2`, r.Tenant, r.ID).Scan(&one); err == nil {
			return nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	// Held to the commit: a racing creation counts after this one.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(pgSessionLock), r.Tenant); err != nil {
		return err
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM glovebox_sessions WHERE tenant = $1`, r.Tenant).Scan(&n); err != nil {
		return err
	}
	if n >= max {
		return &sessionCapError{Open: n}
	}
	_, err := tx.Exec(ctx, `INSERT INTO glovebox_sessions (tenant, id, tools, limits, used) VALUES ($1, $2, $3, $4, $5)`,
		r.Tenant, r.ID, toolsJSON(r.Tools), r.Limits, time.Now().UnixNano())
	return err
}

func (s *pgStore) acquireSession(ctx context.Context, tenant, id, holder string, until time.Time, have int64) (row *sessionRow, err error) {
	// A holder may take its own lease again: an attempt whose answer was
	// lost took it (holder names this executor and the eval's key).
	err = pgRetry(ctx, pgRetryWrite, func(ctx context.Context, _ bool) error {
		now := time.Now().UnixNano()
		row = &sessionRow{Tenant: tenant, ID: id}
		var tools string
		err := s.pool.QueryRow(ctx, `UPDATE glovebox_sessions SET holder = $3, until = $4, used = GREATEST(used, $5)
			WHERE tenant = $1 AND id = $2 AND (holder = '' OR holder = $3 OR until < $5
				OR split_part(holder, '/', 1) NOT IN (SELECT e.id FROM glovebox_executors e WHERE e.seen >= $7))
			RETURNING tools, limits, version, CASE WHEN version = $6 THEN NULL ELSE state END`,
			tenant, id, holder, until.UnixNano(), now, have, time.Now().Add(-pgLease).UnixNano()).Scan(&tools, &row.Limits, &row.Version, &row.State)
		if errors.Is(err, pgx.ErrNoRows) {
			var one int
			err = s.pool.QueryRow(ctx, `SELECT 1 FROM glovebox_sessions WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return errNoEntry
			}
			if err == nil {
				err = errSessionBusy
			}
			return err
		}
		if err == nil {
			row.Tools = parseTools(tools)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return row, nil
}

// pgQuotaLock is the first key of the advisory locks that serialize one
// tenant's state writes (the second is a hash of the tenant), so that
// states stored through several executors at once never pass its room
// together.
const pgQuotaLock = 0x676c7162 // "glqb"

// pgStatesHeld is the bytes of the tenant's states but session
// except's, in tx, once it holds the tenant's quota lock (octet_length
// of a stored bytea reads its size, not its data).
func pgStatesHeld(ctx context.Context, tx pgx.Tx, tenant, except string) (n int64, err error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(pgQuotaLock), tenant); err != nil {
		return 0, err
	}
	err = tx.QueryRow(ctx, `SELECT COALESCE((SELECT SUM(octet_length(state)) FROM glovebox_sessions WHERE tenant = $1 AND id <> $2), 0)::BIGINT
		+ COALESCE((SELECT SUM(octet_length(state)) FROM glovebox_paused WHERE tenant = $1), 0)::BIGINT`, tenant, except).Scan(&n)
	return n, err
}

func (s *pgStore) saveSession(ctx context.Context, tenant, id, holder string, version int64, state []byte, used time.Time, room int64) (held int64, err error) {
	err = pgRetry(ctx, pgRetryWrite, func(ctx context.Context, retried bool) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			held = -1
			if retried {
				// An attempt whose answer was lost stored it: the row
				// is at version, free, used at this save's time.
				var v, u int64
				var h string
				err := tx.QueryRow(ctx, `SELECT version, used, holder FROM glovebox_sessions WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&v, &u, &h)
				if err == nil && v == version && u == used.UnixNano() && h == "" {
					return nil
				}
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
			}
			if room >= 0 {
				others, err := pgStatesHeld(ctx, tx, tenant, id)
				if err == nil {
					held, err = fitState(others, len(state), room)
				}
				if err != nil {
					return err
				}
			}
			tag, err := tx.Exec(ctx, `UPDATE glovebox_sessions SET version = $4, state = $5, holder = '', until = 0, used = $6
				WHERE tenant = $1 AND id = $2 AND holder = $3 AND version = $4 - 1`, tenant, id, holder, version, state, used.UnixNano())
			if err == nil && tag.RowsAffected() == 0 {
				err = errLeaseLost
			}
			return err
		})
	})
	return held, err
}

func (s *pgStore) releaseSession(ctx context.Context, tenant, id, holder string) error {
	return pgRetry(ctx, pgRetryWrite, func(ctx context.Context, _ bool) error {
		_, err := s.pool.Exec(ctx, `UPDATE glovebox_sessions SET holder = '', until = 0 WHERE tenant = $1 AND id = $2 AND holder = $3`, tenant, id, holder)
		return err
	})
}

func (s *pgStore) deleteSession(ctx context.Context, tenant, id string) (ok bool, err error) {
	err = pgRetry(ctx, pgRetryBegin, func(ctx context.Context, retried bool) error {
		tag, err := s.pool.Exec(ctx, `DELETE FROM glovebox_sessions WHERE tenant = $1 AND id = $2`, tenant, id)
		// Gone on a second try: the first, its answer lost, deleted it.
		ok = err == nil && (tag.RowsAffected() == 1 || retried)
		return err
	})
	return ok, err
}

func (s *pgStore) countSessions(ctx context.Context, tenant string) (n int, err error) {
	err = pgRetry(ctx, pgRetryBegin, func(ctx context.Context, _ bool) error {
		return s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM glovebox_sessions WHERE tenant = $1`, tenant).Scan(&n)
	})
	return n, err
}

func (s *pgStore) expireStates(ctx context.Context, before, old time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM glovebox_sessions WHERE used < $1 AND (holder = '' OR until < $2)`, before.UnixNano(), time.Now().UnixNano())
	if err != nil {
		return 0, err
	}
	tag2, err := s.pool.Exec(ctx, `DELETE FROM glovebox_paused WHERE created < $1`, old.UnixNano())
	if err != nil {
		return int(tag.RowsAffected()), err
	}
	n, err := s.expireToolReplies(ctx, old)
	return int(tag.RowsAffected()+tag2.RowsAffected()) + n, err
}

func (s *pgStore) putPaused(ctx context.Context, tenant, key string, p *pausedRow, room int64) (held int64, err error) {
	err = pgRetry(ctx, pgRetryWrite, func(ctx context.Context, retried bool) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			held = -1
			if room >= 0 {
				others, err := pgStatesHeld(ctx, tx, tenant, "")
				if err == nil {
					held, err = fitState(others, len(p.State), room)
				}
				if err != nil {
					return err
				}
			}
			tag, err := tx.Exec(ctx, `INSERT INTO glovebox_paused (tenant, key, tools, limits, state, created) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (tenant, key) DO NOTHING`, tenant, key, toolsJSON(p.Tools), p.Limits, p.State, time.Now().UnixNano())
			if err == nil && tag.RowsAffected() == 0 && !retried {
				// Only this eval pauses under its key: a row there is an
				// earlier attempt's whose answer was lost, else a bug.
				err = fmt.Errorf("executor: a pause is stored under key %s already", key)
			}
			return err
		})
	})
	return held, err
}

func (s *pgStore) deletePaused(ctx context.Context, tenant, key string) error {
	return pgRetry(ctx, pgRetryWrite, func(ctx context.Context, _ bool) error {
		_, err := s.pool.Exec(ctx, `DELETE FROM glovebox_paused WHERE tenant = $1 AND key = $2 AND claimed = ''`, tenant, key)
		return err
	})
}

func (s *pgStore) claimPaused(ctx context.Context, tenant, key, by string) (p *pausedRow, err error) {
	err = pgRetry(ctx, pgRetryWrite, func(ctx context.Context, retried bool) error {
		p = &pausedRow{}
		var tools string
		err := s.pool.QueryRow(ctx, `UPDATE glovebox_paused SET claimed = $3 WHERE tenant = $1 AND key = $2 AND claimed = ''
			RETURNING tools, limits, state`, tenant, key, by).Scan(&tools, &p.Limits, &p.State)
		if errors.Is(err, pgx.ErrNoRows) {
			err = s.pool.QueryRow(ctx, `SELECT tools, limits, state, claimed FROM glovebox_paused WHERE tenant = $1 AND key = $2`,
				tenant, key).Scan(&tools, &p.Limits, &p.State, &p.ClaimedBy)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return errNoEntry
			case err != nil:
				return err
			case !retried || p.ClaimedBy != by:
				return errPausedUsed
			}
			// Claimed by this continue: an attempt whose answer was lost.
			p.ClaimedBy = ""
		}
		if err == nil {
			p.Tools = parseTools(tools)
		}
		return err
	})
	if errors.Is(err, errPausedUsed) {
		return p, err
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (s *pgStore) peekPaused(ctx context.Context, tenant, key string) (p *pausedRow, err error) {
	var tools string
	var none bool
	err = pgRetry(ctx, pgRetryBegin, func(ctx context.Context, _ bool) error {
		p = &pausedRow{}
		err := s.pool.QueryRow(ctx, `SELECT tools, limits, state, claimed FROM glovebox_paused WHERE tenant = $1 AND key = $2`, tenant, key).Scan(&tools, &p.Limits, &p.State, &p.ClaimedBy)
		none = errors.Is(err, pgx.ErrNoRows)
		if none {
			return nil
		}
		return err
	})
	return peeked(p, tools, none, err)
}

func (s *pgStore) stateBytes(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, SUM(n)::BIGINT FROM (
		SELECT tenant, COALESCE(LENGTH(state), 0) AS n FROM glovebox_sessions UNION ALL SELECT tenant, LENGTH(state) FROM glovebox_paused) u GROUP BY tenant`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return tenantBytes(rows)
}
