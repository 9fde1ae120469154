package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

func (s *pgStore) begin(ctx context.Context, e *entry) (*entry, bool, error) {
	p := s.pool
	if e.State != "running" { // see store.begin: queued is not waited for
		p = s.async
	}
	tag, err := p.Exec(ctx, `INSERT INTO glovebox_jobs (tenant, key, kind, hash, state, started, created, updated, owner)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8) ON CONFLICT (tenant, key) DO NOTHING`,
		e.Tenant, e.Key, e.Kind, e.Hash, e.State, e.Started, e.Created.UnixNano(), s.owner)
	if err != nil {
		return nil, false, err
	}
	if tag.RowsAffected() == 1 {
		return nil, true, nil
	}
	old, err := s.get(ctx, e.Tenant, e.Key)
	return old, false, err
}

func (s *pgStore) set(ctx context.Context, p *pgxpool.Pool, tenant, key, state string, started bool, record []byte) error {
	_, err := p.Exec(ctx, `UPDATE glovebox_jobs SET state = $1, started = $2, updated = $3, record = COALESCE($4, record)
		WHERE tenant = $5 AND key = $6`, state, started, time.Now().UnixNano(), record, tenant, key)
	return err
}

func (s *pgStore) update(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	return s.set(ctx, s.pool, tenant, key, state, started, record)
}

func (s *pgStore) finish(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	return s.set(ctx, s.async, tenant, key, state, started, record)
}

func (s *pgStore) get(ctx context.Context, tenant, key string) (*entry, error) {
	e := &entry{Tenant: tenant, Key: key}
	var created int64
	err := s.pool.QueryRow(ctx, `SELECT kind, hash, state, started, created, record FROM glovebox_jobs WHERE tenant = $1 AND key = $2`,
		tenant, key).Scan(&e.Kind, &e.Hash, &e.State, &e.Started, &created, &e.Record)
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

// pgFull reports whether err is PostgreSQL's disk_full (SQLSTATE 53100).
func pgFull(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53100"
}
