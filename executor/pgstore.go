package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgLease is how long an executor's heartbeat in a PostgreSQL store
// vouches for its unfinished entries: an executor not seen for this long
// is taken for dead, and its queued and running entries are marked lost
// by the next executor that looks (at its start, then every pgLease/3).
const pgLease = 30 * time.Second

// pgStore is the store in a PostgreSQL database, shared by a fleet of
// executors. Its tables are made on first use (under an advisory lock,
// so that executors starting together do not race). Every entry names
// the executor that owns it (owner: a random ID per process); an owner
// heartbeats in glovebox_executors, and recover marks lost only the
// unfinished entries of owners whose heartbeat is stale, so one
// executor's restart never declares its peers' runs lost.
//
// Durability: begin (of a running entry) and update commit with
// synchronous_commit on (the commit is flushed to PostgreSQL's WAL before
// they return); finish, and the begin of a queued entry (store.begin),
// use a second pool whose sessions have synchronous_commit off, which
// returns before the flush, exactly as the SQLite store's do: a database
// crash before the next flush leaves the entry running, read as lost (a
// queued one: gone, and it never ran); the WAL is one sequence, so a
// flush for a later update covers them. PostgreSQL groups the WAL flushes of concurrent commits itself
// (each committer waits for one flush that covers every commit before
// it), so concurrent requests share fsyncs here as they do in the SQLite
// store's writer. Two executors racing for one key are decided by the
// primary key: one INSERT wins, the other finds its row.
type pgStore struct {
	pool, async *pgxpool.Pool
	owner       string
	listen      *pgx.ConnConfig // of the connection LISTENing for relayed answers (relay.go)

	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

// isPostgresURL reports whether s names a PostgreSQL store (a
// postgres:// or postgresql:// URL).
func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

const pgSchema = `
CREATE TABLE IF NOT EXISTS glovebox_jobs (
	tenant  TEXT    NOT NULL,
	key     TEXT    NOT NULL,
	kind    TEXT    NOT NULL,
	hash    TEXT    NOT NULL,
	state   TEXT    NOT NULL,
	started BOOLEAN NOT NULL DEFAULT false,
	created BIGINT  NOT NULL,
	updated BIGINT  NOT NULL,
	owner   TEXT    NOT NULL,
	record  BYTEA,
	PRIMARY KEY (tenant, key)
);
CREATE INDEX IF NOT EXISTS glovebox_jobs_unfinished ON glovebox_jobs (owner) WHERE state IN ('queued', 'running');
CREATE TABLE IF NOT EXISTS glovebox_executors (id TEXT PRIMARY KEY, seen BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS glovebox_probe (id TEXT PRIMARY KEY, at BIGINT NOT NULL)`

// pgSchemaLock is the advisory lock key held while the tables are made.
const pgSchemaLock = 0x676c6f7665 // "glove"

func openPgStore(ctx context.Context, url string) (*pgStore, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("executor: store: %w", err)
	}
	acfg := cfg.Copy()
	acfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	acfg.MaxConns = max(2, cfg.MaxConns/2)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("executor: store: %w", err)
	}
	async, err := pgxpool.NewWithConfig(ctx, acfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("executor: store: %w", err)
	}
	id := make([]byte, 8)
	rand.Read(id)
	s := &pgStore{pool: pool, async: async, owner: hex.EncodeToString(id), listen: cfg.ConnConfig.Copy(), stop: make(chan struct{})}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgSchemaLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pgSchema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO glovebox_executors (id, seen) VALUES ($1, $2)`, s.owner, time.Now().UnixNano())
		return err
	})
	if err != nil {
		pool.Close()
		async.Close()
		return nil, fmt.Errorf("executor: store: %w", err)
	}
	s.done.Add(1)
	go s.heartbeat()
	return s, nil
}

// heartbeat keeps this executor's lease fresh and marks the entries of
// executors whose lease ran out lost, every pgLease/3.
func (s *pgStore) heartbeat() {
	defer s.done.Done()
	t := time.NewTicker(pgLease / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), pgLease/3)
		s.pool.Exec(ctx, `UPDATE glovebox_executors SET seen = $2 WHERE id = $1`, s.owner, time.Now().UnixNano())
		s.recover(ctx, time.Now())
		cancel()
	}
}

func (s *pgStore) begin(ctx context.Context, e *entry) (old *entry, created bool, err error) {
	p := s.pool
	if e.State != "running" { // see store.begin: queued is not waited for
		p = s.async
	}
	err = pgRetry(ctx, pgRetryBegin, func(ctx context.Context, retried bool) error {
		tag, err := p.Exec(ctx, `INSERT INTO glovebox_jobs (tenant, key, kind, hash, state, started, created, updated, owner)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8) ON CONFLICT (tenant, key) DO NOTHING`,
			e.Tenant, e.Key, e.Kind, e.Hash, e.State, e.Started, e.Created.UnixNano(), s.owner)
		if err != nil {
			return err
		}
		if created = tag.RowsAffected() == 1; created {
			return nil
		}
		if old, err = s.get1(ctx, e.Tenant, e.Key); err != nil {
			return err
		}
		if retried && old.owner == s.owner && old.Created.Equal(e.Created) && old.Hash == e.Hash && old.Kind == e.Kind {
			// This very insert, committed by an attempt whose answer
			// was lost (its created time is this request's, to the
			// nanosecond, and this executor runs one job per key).
			old, created = nil, true
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return old, created, nil
}

// set is update and finish: one UPDATE by key, the same whether it runs
// once or again after an attempt whose answer was lost, so it is retried
// while the store cannot be reached (pgRetryWrite).
func (s *pgStore) set(ctx context.Context, p *pgxpool.Pool, tenant, key, state string, started bool, record []byte) error {
	return pgRetry(ctx, pgRetryWrite, func(ctx context.Context, _ bool) error {
		_, err := p.Exec(ctx, `UPDATE glovebox_jobs SET state = $1, started = $2, updated = $3, record = COALESCE($4, record)
			WHERE tenant = $5 AND key = $6`, state, started, time.Now().UnixNano(), record, tenant, key)
		return err
	})
}

func (s *pgStore) update(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	return s.set(ctx, s.pool, tenant, key, state, started, record)
}

func (s *pgStore) finish(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	return s.set(ctx, s.async, tenant, key, state, started, record)
}

func (s *pgStore) get(ctx context.Context, tenant, key string) (e *entry, err error) {
	err = pgRetry(ctx, pgRetryBegin, func(ctx context.Context, _ bool) error {
		e, err = s.get1(ctx, tenant, key)
		return err
	})
	return e, err
}

// get1 is one attempt of get, the entry's owner included.
func (s *pgStore) get1(ctx context.Context, tenant, key string) (*entry, error) {
	e := &entry{Tenant: tenant, Key: key}
	var created int64
	err := s.pool.QueryRow(ctx, `SELECT kind, hash, state, started, created, record, owner FROM glovebox_jobs WHERE tenant = $1 AND key = $2`,
		tenant, key).Scan(&e.Kind, &e.Hash, &e.State, &e.Started, &created, &e.Record, &e.owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoEntry
	}
	if err != nil {
		return nil, err
	}
	e.Created = time.Unix(0, created)
	return e, nil
}

// recover marks lost the unfinished entries of every executor other than
// this one whose lease ran out (or that never registered), and forgets
// those executors.
func (s *pgStore) recover(ctx context.Context, now time.Time) (int, error) {
	stale := now.Add(-pgLease).UnixNano()
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE glovebox_jobs SET state = 'lost', updated = $1
			WHERE state IN ('queued', 'running') AND owner <> $2
			AND owner NOT IN (SELECT id FROM glovebox_executors WHERE seen >= $3)`, now.UnixNano(), s.owner, stale)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `DELETE FROM glovebox_executors WHERE seen < $1 AND id <> $2`, stale, s.owner)
		return err
	})
	return int(n), err
}

func (s *pgStore) purge(ctx context.Context, before time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM glovebox_jobs WHERE state NOT IN ('queued', 'running') AND updated < $1`, before.UnixNano())
	return int(tag.RowsAffected()), err
}

func (s *pgStore) usage(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, COALESCE(SUM(LENGTH(record)), 0)::BIGINT FROM glovebox_jobs GROUP BY tenant`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return tenantBytes(rows)
}

func (s *pgStore) probe(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO glovebox_probe (id, at) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET at = EXCLUDED.at`,
		s.owner, time.Now().UnixNano())
	return err
}

func (s *pgStore) ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// close stops the heartbeat and removes this executor's lease (its
// unfinished entries, if any, are lost at once for the next recover).
func (s *pgStore) close() error {
	s.once.Do(func() {
		close(s.stop)
		s.done.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.pool.Exec(ctx, `DELETE FROM glovebox_executors WHERE id = $1`, s.owner)
		cancel()
		s.pool.Close()
		s.async.Close()
	})
	return nil
}

// Bounds of the retries of a store operation that failed because
// PostgreSQL could not be reached (pgRetry): a new request's begin, and
// a read, give up soon, so that the request is refused unavailable
// (503, Retry-After) while the database is down, rather than held; a
// write for a job already under way (its state, its final record, its
// session's state and lease, its pause) keeps trying longer, to ride
// out a database restart (a few seconds) rather than lose the job's
// outcome. Our choices.
const (
	pgRetryBegin = 2 * time.Second
	pgRetryWrite = 30 * time.Second
)

// errStoreDown wraps the last error of an operation that could not reach
// the store within its retries: the request is refused unavailable.
var errStoreDown = errors.New("the store cannot be reached")

// pgRetry runs op until it succeeds, fails for another reason than the
// database being out of reach (pgTransient), or bound has passed (then
// the last error, wrapping errStoreDown), waiting 50 ms, then twice as
// long each time up to a second, while the pool reconnects. retried is
// true from op's second call on: an earlier call may have committed and
// lost its answer (a connection that broke after the statement was
// sent), which op must take for its own success, as each caller's does
// (a statement keyed by the job's key, or a check that the row it finds
// is the one it wrote).
func pgRetry(ctx context.Context, bound time.Duration, op func(ctx context.Context, retried bool) error) error {
	deadline := time.Now().Add(bound)
	// Each attempt ends by the deadline too: a host that does not
	// answer at all (no refusal) must not hold the caller past it.
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	wait := 50 * time.Millisecond
	for retried := false; ; retried = true {
		err := op(actx, retried)
		if err != nil && ctx.Err() == nil && actx.Err() != nil {
			return fmt.Errorf("%w (tried for %v): %w", errStoreDown, bound, err)
		}
		if err == nil || !pgTransient(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (tried for %v): %w", errStoreDown, bound, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// pgTransient reports whether err says PostgreSQL could not be reached
// or ended the session (a restart, a failover, a connection dropped):
// the pool connects afresh for the next attempt. A server's refusal of
// the statement itself (a constraint, a full disk, a bad password) is
// not: another attempt would fail the same way.
func pgTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08: connection exception; 57P01–57P03: the server is
		// shutting down, crashed, or not yet accepting connections;
		// 53300: too many connections.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// pgFull reports whether err is PostgreSQL's disk_full (SQLSTATE 53100).
func pgFull(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53100"
}
