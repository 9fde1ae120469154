package executor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)
)

// store is the durable idempotency record: (tenant, key) → request hash,
// state and final record. Every job is recorded (begin) before any work
// starts, and its state is written before each step, so a restart finds
// every run that was in progress and reports it as lost (recover) rather
// than running it again. Evals share it with kind "eval".
type store interface {
	// begin records a new entry (state e.State, queued or running),
	// durably, unless the tenant already has one under e.Key: then it
	// returns that one and false.
	begin(ctx context.Context, e *entry) (existing *entry, created bool, err error)
	// update sets an entry's state, started flag and record (JSON; nil
	// keeps the stored one), durably.
	update(ctx context.Context, tenant, key, state string, started bool, record []byte) error
	// finish is update for a final record, without waiting for the disk:
	// if the machine loses power before a later durable write, the entry
	// reverts to "running" and is reported lost, which is still true
	// (and still never re-run). A process crash loses nothing (WAL).
	finish(ctx context.Context, tenant, key, state string, started bool, record []byte) error
	// get returns the tenant's entry for key, or errNoEntry.
	get(ctx context.Context, tenant, key string) (*entry, error)
	// recover marks every queued or running entry lost and returns how
	// many there were. Called once at start, before serving.
	recover(ctx context.Context, now time.Time) (int, error)
	// purge deletes the final entries last updated before t and
	// returns how many.
	purge(ctx context.Context, before time.Time) (int, error)
	// usage is the bytes of records each tenant has stored.
	usage(ctx context.Context) (map[string]int64, error)
	// probe makes one small durable write, to learn whether writes
	// succeed again after one failed.
	probe(ctx context.Context) error
	ping(ctx context.Context) error
	close() error
}

// storeFull reports whether err is the store's disk (or SQLite's size
// limit) being full: SQLITE_FULL.
func storeFull(err error) bool {
	var ce interface{ Code() int }
	return errors.As(err, &ce) && ce.Code()&0xff == 13
}

// entry is one stored job. Record is the JSON of a wire.Record.
type entry struct {
	Tenant, Key, Kind, Hash, State string
	Started                        bool
	Created                        time.Time
	Record                         []byte
}

var errNoEntry = errors.New("executor: no such entry")

// sqliteStore is the store in one SQLite file (modernc.org/sqlite, the
// driver the support-desk example uses), in WAL mode with synchronous=FULL
// so a committed begin or running state survives the process being killed
// and the machine losing power (final records: see finish). One connection: writes are serialized by SQLite anyway,
// and one connection never sees SQLITE_BUSY.
type sqliteStore struct{ db *sql.DB }

func openStore(path string) (*sqliteStore, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS jobs (
		tenant  TEXT NOT NULL,
		key     TEXT NOT NULL,
		kind    TEXT NOT NULL,
		hash    TEXT NOT NULL,
		state   TEXT NOT NULL,
		started INTEGER NOT NULL DEFAULT 0,
		created INTEGER NOT NULL,
		updated INTEGER NOT NULL,
		record  BLOB,
		PRIMARY KEY (tenant, key)
	);
	CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)`)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("executor: store %s: %w", path, err)
	}
	return &sqliteStore{db: db}, nil
}

func (s *sqliteStore) begin(ctx context.Context, e *entry) (*entry, bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO jobs (tenant, key, kind, hash, state, started, created, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, key) DO NOTHING`,
		e.Tenant, e.Key, e.Kind, e.Hash, e.State, e.Started, e.Created.UnixNano(), e.Created.UnixNano())
	if err != nil {
		return nil, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil, true, nil
	}
	old, err := s.get(ctx, e.Tenant, e.Key)
	return old, false, err
}

func (s *sqliteStore) update(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	_, err := s.db.ExecContext(ctx, `UPDATE jobs SET state = ?, started = ?, updated = ?, record = COALESCE(?, record)
		WHERE tenant = ? AND key = ?`, state, started, time.Now().UnixNano(), record, tenant, key)
	return err
}

func (s *sqliteStore) finish(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	// One pinned connection: synchronous=NORMAL for this commit only (in
	// WAL mode it skips the fsync; the next FULL commit syncs it along).
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
		return err
	}
	_, err = c.ExecContext(ctx, `UPDATE jobs SET state = ?, started = ?, updated = ?, record = COALESCE(?, record)
		WHERE tenant = ? AND key = ?`, state, started, time.Now().UnixNano(), record, tenant, key)
	if _, rerr := c.ExecContext(context.Background(), `PRAGMA synchronous = FULL`); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

func (s *sqliteStore) get(ctx context.Context, tenant, key string) (*entry, error) {
	e := &entry{Tenant: tenant, Key: key}
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT kind, hash, state, started, created, record FROM jobs WHERE tenant = ? AND key = ?`,
		tenant, key).Scan(&e.Kind, &e.Hash, &e.State, &e.Started, &created, &e.Record)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoEntry
	}
	if err != nil {
		return nil, err
	}
	e.Created = time.Unix(0, created)
	return e, nil
}

func (s *sqliteStore) recover(ctx context.Context, now time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET state = 'lost', updated = ? WHERE state IN ('queued', 'running')`, now.UnixNano())
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func (s *sqliteStore) purge(ctx context.Context, before time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM jobs WHERE state NOT IN ('queued', 'running') AND updated < ?`, before.UnixNano())
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func (s *sqliteStore) usage(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant, COALESCE(SUM(LENGTH(record)), 0) FROM jobs GROUP BY tenant`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var t string
		var n int64
		if err := rows.Scan(&t, &n); err != nil {
			return nil, err
		}
		out[t] = n
	}
	return out, rows.Err()
}

func (s *sqliteStore) probe(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO probe (id, at) VALUES (1, ?)`, time.Now().UnixNano())
	return err
}

func (s *sqliteStore) ping(ctx context.Context) error {
	var one int
	return s.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}

func (s *sqliteStore) close() error { return s.db.Close() }
