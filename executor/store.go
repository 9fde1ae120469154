package executor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)
)

// store is the durable idempotency record: (tenant, key) → request hash,
// state and final record. Every job is recorded (begin) before any work
// starts, and its state is written before each step, so a restart finds
// every run that was in progress and reports it as lost (recover) rather
// than running it again. Evals share it with kind "eval".
type store interface {
	// begin records a new entry (state e.State, queued or running)
	// unless the tenant already has one under e.Key: then it returns
	// that one and false. A running entry is durable when begin returns;
	// a queued one is committed (every executor sees it) but not waited
	// for on disk: the job does not start before its update to running,
	// which is durable and, the log being sequential, makes the begin so
	// too. A power loss before then forgets a job that never started,
	// and a retry under its key runs it once.
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
// limit) being full: SQLITE_FULL, or PostgreSQL's disk_full.
func storeFull(err error) bool {
	var ce interface{ Code() int }
	return errors.As(err, &ce) && ce.Code()&0xff == 13 || pgFull(err)
}

// entry is one stored job. Record is the JSON of a wire.Record.
type entry struct {
	Tenant, Key, Kind, Hash, State string
	Started                        bool
	Created                        time.Time
	Record                         []byte
	owner                          string // the executor that made it (PostgreSQL)
}

var (
	errNoEntry     = errors.New("executor: no such entry")
	errStoreClosed = errors.New("executor: the store is closed")
)

// sqliteStore is the store in one SQLite file (modernc.org/sqlite, the
// driver the support-desk example uses), in WAL mode, so a committed begin
// or running state survives the process being killed and the machine
// losing power (final records: see finish).
//
// Writes are grouped (group commit) on the one writing connection: a
// write joins a queue; when no commit is under way its writer becomes the
// leader and commits every queued write (up to maxBatch) in one
// transaction, then answers each; writes that queue up meanwhile go into
// the next one, which the first of them leads. Reads use a pool of their
// own (WAL readers do not block the writer).
//
// The disk is waited for apart from the commit (the connection runs with
// synchronous=NORMAL: a commit writes the WAL without an fsync): a
// durable write, once committed, waits for an fsync of the WAL file that
// started after its commit (syncWAL; one fsync covers every commit before
// it, so concurrent durable writes share it, and it runs while the writer
// commits the next batch); a final record (finish) is answered at its
// commit and never waits for the disk, nor for another request's fsync;
// nor does the begin of a queued entry (store.begin).
// This is what synchronous=FULL does (an fsync of the WAL after each
// commit), taken out of the writer's way. After a failed fsync every later
// durable write fails (the kernel may have dropped the unwritten pages, so
// no later fsync proves them on disk); the executor must be restarted.
type sqliteStore struct {
	w, r *sql.DB
	// wc is the writer's one connection, held for the store's life, so
	// that a transaction is three prepared statements on it (BEGIN,
	// the writes, COMMIT) rather than a database/sql Tx, whose driver
	// parses "begin" and "commit" anew each time (a tenth of the
	// store's user time in BenchmarkStoreEval's profile).
	wc *sql.Conn

	mu      sync.Mutex
	queue   []*storeOp // writes waiting for a commit
	leading bool       // a writer is committing (it leads until it hands on)
	closed  bool
	pending sync.WaitGroup // writes not yet answered
	// commits counts the transactions the writer committed (tests).
	commits atomic.Int64
	// The writer's statements, prepared once on its connection.
	insert, set, lookup, txBegin, txCommit, txRollback *sql.Stmt

	// The WAL's fsyncs (syncWAL), under smu: committed is the number of
	// the last commit, synced that of the last commit an fsync covered;
	// syncing is set while one runs; syncErr, once set, fails every later
	// durable write. fsync is the fsync itself (tests replace it); wal is
	// the WAL file it syncs, opened on first use.
	smu       sync.Mutex
	scond     *sync.Cond
	committed uint64
	synced    uint64
	syncing   bool
	syncErr   error
	path      string
	wal       *os.File
	walInfo   os.FileInfo // wal's, when opened: is the name still it?
	fsync     func() error
	// syncs counts the fsyncs of the WAL (tests).
	syncs atomic.Int64
}

const (
	sqlInsert = `INSERT INTO jobs (tenant, key, kind, hash, state, started, created, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, key) DO NOTHING`
	sqlSet = `UPDATE jobs SET state = ?, started = ?, updated = ?, record = COALESCE(?, record)
		WHERE tenant = ? AND key = ?`
	sqlLookup = `SELECT kind, hash, state, started, created, record FROM jobs WHERE tenant = ? AND key = ?`
)

// storeOp is one queued write: run executes it inside the batch's
// transaction; durable says it must wait for the disk after its commit
// (numbered seq).
type storeOp struct {
	durable bool
	run     func(tx wtx) error
	err     chan error
	seq     uint64
}

// maxBatch bounds one group commit, so one transaction stays short.
const maxBatch = 256

func openStore(path string) (*sqliteStore, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)"
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	if err := checkStore(w, path); err != nil {
		w.Close()
		return nil, err
	}
	_, err = w.Exec(`CREATE TABLE IF NOT EXISTS jobs (
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
	) WITHOUT ROWID;
	CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)`)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("executor: store %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(4)
	s := &sqliteStore{w: w, r: r, path: path}
	s.scond = sync.NewCond(&s.smu)
	s.fsync = s.syncWALFile
	if s.wc, err = w.Conn(context.Background()); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("executor: store %s: %w", path, err)
	}
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{{&s.insert, sqlInsert}, {&s.set, sqlSet}, {&s.lookup, sqlLookup},
		{&s.txBegin, "BEGIN"}, {&s.txCommit, "COMMIT"}, {&s.txRollback, "ROLLBACK"}} {
		if *p.st, err = s.wc.PrepareContext(context.Background(), p.q); err != nil {
			s.wc.Close()
			w.Close()
			r.Close()
			return nil, fmt.Errorf("executor: store %s: %w", path, err)
		}
	}
	return s, nil
}

// checkStore refuses a damaged store file before anything is served
// from it: SQLite's quick_check (every b-tree page, cell and overflow
// chain, the free list; not the indexes against their tables, which
// integrity_check adds at about twice the cost) must say "ok", and a
// file that is not a database at all (a smashed header) is refused the
// same way. It reads the whole file: on this 2-core development machine,
// a 360 MiB store took 0.9–1.5 s (0.3–0.5 s of processor time, the file
// in the page cache; from a cold disk, its read rate bounds it). Its
// error names the file and what to do.
func checkStore(db *sql.DB, path string) error {
	rows, err := db.Query(`PRAGMA quick_check(8)`)
	var found []string
	if err == nil {
		for rows.Next() {
			var line string
			if err = rows.Scan(&line); err != nil {
				break
			}
			found = append(found, line)
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
	}
	switch {
	case err == nil && len(found) == 1 && found[0] == "ok":
		return nil
	case err == nil:
		return damagedStore(path, strings.Join(found, "; "))
	case sqliteDamaged(err):
		return damagedStore(path, err.Error())
	}
	return fmt.Errorf("executor: store %s: %w", path, err)
}

// sqliteDamaged reports whether err is SQLite's SQLITE_CORRUPT or
// SQLITE_NOTADB: the file is not a sound database.
func sqliteDamaged(err error) bool {
	var ce interface{ Code() int }
	return errors.As(err, &ce) && (ce.Code()&0xff == 11 || ce.Code()&0xff == 26)
}

// damagedStore is the refusal to start on a damaged store file.
func damagedStore(path, what string) error {
	return fmt.Errorf("executor: the store %s is damaged (SQLite found: %s); the executor does not serve from it. "+
		"Stop every executor using it and keep a copy of the file (with its -wal and -shm files); then restore it from a backup, "+
		"or recover what SQLite can still read into a new file (sqlite3 %s .recover | sqlite3 NEW.db) and start on that, "+
		"or start on a new file: the keys of the records it held are then unknown, and a retry of one runs anew", path, what, path)
}

// wtx is the writer's transaction under way, on its one connection: what
// a queued write runs its statements through.
type wtx struct{ c *sql.Conn }

// Exec runs one statement of the transaction (parsed each time: for the
// rare writes; the hot ones use the prepared statements).
func (t wtx) Exec(query string, args ...any) (sql.Result, error) {
	return t.c.ExecContext(context.Background(), query, args...)
}

// QueryRow reads one row inside the transaction.
func (t wtx) QueryRow(query string, args ...any) *sql.Row {
	return t.c.QueryRowContext(context.Background(), query, args...)
}

// errLead answers a queued write whose writer is to lead the next commit.
var errLead = errors.New("lead")

// write queues run and waits for the commit that holds it, leading one
// if none is under way. It waits even when the caller's context ends: a
// write that may still commit must not be reported as failed.
func (s *sqliteStore) write(durable bool, run func(tx wtx) error) error {
	op := &storeOp{durable: durable, run: run, err: make(chan error, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errStoreClosed
	}
	s.pending.Add(1)
	defer s.pending.Done()
	s.queue = append(s.queue, op)
	if s.leading {
		s.mu.Unlock()
		if err := <-op.err; err != errLead {
			return err
		}
		s.mu.Lock() // handed the lead: op is first in the queue
	}
	s.leading = true
	batch := s.queue[:min(len(s.queue), maxBatch)]
	s.queue = append([]*storeOp(nil), s.queue[len(batch):]...)
	s.mu.Unlock()
	s.commitBatch(batch)
	s.mu.Lock()
	if len(s.queue) > 0 {
		s.queue[0].err <- errLead // the next leader; s.leading stays true
	} else {
		s.leading = false
	}
	s.mu.Unlock()
	if err := <-op.err; err != nil || !durable {
		return err
	}
	return s.waitSynced(op.seq)
}

// waitSynced returns once an fsync of the WAL that started after commit
// seq has ended: at once if one has, else by running one (covering every
// commit so far) or waiting for the one under way and, if that started
// too early, the next. Its error is the fsync's, or the first failed
// fsync's for every later call.
func (s *sqliteStore) waitSynced(seq uint64) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	for s.synced < seq && s.syncErr == nil {
		if s.syncing {
			s.scond.Wait()
			continue
		}
		s.syncing = true
		upto := s.committed
		s.smu.Unlock()
		err := s.fsync()
		s.syncs.Add(1)
		s.smu.Lock()
		s.syncing = false
		if err != nil {
			s.syncErr = fmt.Errorf("executor: store: an fsync of the WAL failed, so no later write can be known to be on disk; restart the executor: %w", err)
		} else {
			s.synced = max(s.synced, upto)
		}
		s.scond.Broadcast()
	}
	return s.syncErr
}

// syncWALFile fsyncs the store's WAL file (path-wal), opening it first,
// and again whenever SQLite made it anew (a new file is synced with its
// directory, so that its name is on disk too). The WAL exists from the
// first commit on and lives while a connection is open.
//
// The sync is fdatasync(2): the WAL's data and what reading it back
// needs (its size, when a commit grew it), not its timestamps. SQLite
// restarts the WAL from its start after a checkpoint, so most commits
// leave its size alone and fsync's journal commit was for the mtime
// alone (7% less system time per eval in BenchmarkStoreEval, medians of
// 3 in alternation; SQLite itself syncs with fdatasync on Linux).
func (s *sqliteStore) syncWALFile() error {
	name := s.path + "-wal"
	if s.wal != nil {
		if fi, err := os.Stat(name); err != nil || !os.SameFile(s.walInfo, fi) {
			s.wal.Close()
			s.wal = nil
		}
	}
	if s.wal == nil {
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		if d, err := os.Open(filepath.Dir(name)); err == nil {
			err = d.Sync()
			d.Close()
			if err != nil {
				f.Close()
				return err
			}
		}
		s.wal, s.walInfo = f, fi
	}
	raw, err := s.wal.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := raw.Control(func(fd uintptr) {
		for err = syscall.Fdatasync(int(fd)); err == syscall.EINTR; err = syscall.Fdatasync(int(fd)) {
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// commitBatch commits batch in one transaction and answers each write
// (a durable one then waits for the disk: write).
func (s *sqliteStore) commitBatch(batch []*storeOp) {
	if err := s.commit(batch); err != nil {
		// One write failed (or the commit did): the batch rolled back;
		// each write is retried alone, so each gets its own answer (one
		// full disk must not fail its neighbours).
		for _, op := range batch {
			op.err <- s.commit([]*storeOp{op})
		}
		return
	}
	for _, op := range batch {
		op.err <- nil
	}
}

// queued is how many writes wait for a commit (tests).
func (s *sqliteStore) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// commit runs ops in one transaction: all of them committed, or none.
func (s *sqliteStore) commit(ops []*storeOp) error {
	if _, err := s.txBegin.Exec(); err != nil {
		return err
	}
	tx := wtx{s.wc}
	for _, op := range ops {
		if err := op.run(tx); err != nil {
			s.txRollback.Exec()
			return err
		}
	}
	if _, err := s.txCommit.Exec(); err != nil {
		// A COMMIT that failed (SQLITE_FULL, say) may leave the
		// transaction open: end it, so the next BEGIN starts afresh (an
		// error here means there was none left to end).
		s.txRollback.Exec()
		return err
	}
	s.commits.Add(1)
	s.smu.Lock()
	s.committed++
	for _, op := range ops {
		op.seq = s.committed
	}
	s.smu.Unlock()
	return nil
}

func (s *sqliteStore) begin(ctx context.Context, e *entry) (old *entry, created bool, err error) {
	err = s.write(e.State == "running", func(tx wtx) error {
		old, created = nil, false
		res, err := s.insert.Exec(e.Tenant, e.Key, e.Kind, e.Hash, e.State, e.Started, e.Created.UnixNano(), e.Created.UnixNano())
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			created = true
			return nil
		}
		old, err = getEntry(s.lookup.QueryRow, e.Tenant, e.Key)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return old, created, nil
}

func (s *sqliteStore) update(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	return s.write(true, s.setEntry(tenant, key, state, started, record))
}

func (s *sqliteStore) finish(ctx context.Context, tenant, key, state string, started bool, record []byte) error {
	return s.write(false, s.setEntry(tenant, key, state, started, record))
}

// setEntry is the write of update and finish.
func (s *sqliteStore) setEntry(tenant, key, state string, started bool, record []byte) func(tx wtx) error {
	return func(wtx) error {
		_, err := s.set.Exec(state, started, time.Now().UnixNano(), record, tenant, key)
		return err
	}
}

func (s *sqliteStore) get(ctx context.Context, tenant, key string) (*entry, error) {
	return getEntry(func(args ...any) *sql.Row { return s.r.QueryRowContext(ctx, sqlLookup, args...) }, tenant, key)
}

// getEntry reads one entry through queryRow (a pool's or a transaction's).
func getEntry(queryRow func(args ...any) *sql.Row, tenant, key string) (*entry, error) {
	e := &entry{Tenant: tenant, Key: key}
	var created int64
	err := queryRow(tenant, key).Scan(&e.Kind, &e.Hash, &e.State, &e.Started, &created, &e.Record)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoEntry
	}
	if err != nil {
		return nil, err
	}
	e.Created = time.Unix(0, created)
	return e, nil
}

func (s *sqliteStore) recover(ctx context.Context, now time.Time) (n int, err error) {
	err = s.write(true, func(tx wtx) error {
		res, err := tx.Exec(`UPDATE jobs SET state = 'lost', updated = ? WHERE state IN ('queued', 'running')`, now.UnixNano())
		if err == nil {
			n = affected(res)
		}
		return err
	})
	return n, err
}

func (s *sqliteStore) purge(ctx context.Context, before time.Time) (n int, err error) {
	err = s.write(true, func(tx wtx) error {
		res, err := tx.Exec(`DELETE FROM jobs WHERE state NOT IN ('queued', 'running') AND updated < ?`, before.UnixNano())
		if err == nil {
			n = affected(res)
		}
		return err
	})
	return n, err
}

func affected(res sql.Result) int {
	n, _ := res.RowsAffected()
	return int(n)
}

func (s *sqliteStore) usage(ctx context.Context) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tenant, COALESCE(SUM(LENGTH(record)), 0) FROM jobs GROUP BY tenant`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return tenantBytes(rows)
}

// tenantBytes reads usage's rows (tenant, bytes) from either store.
func tenantBytes(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) (map[string]int64, error) {
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
	return s.write(true, func(tx wtx) error {
		_, err := tx.Exec(`INSERT OR REPLACE INTO probe (id, at) VALUES (1, ?)`, time.Now().UnixNano())
		return err
	})
}

func (s *sqliteStore) ping(ctx context.Context) error {
	var one int
	return s.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}

// close waits until every queued write is answered, then closes the
// database; a write after close returns errStoreClosed.
func (s *sqliteStore) close() error {
	s.mu.Lock()
	was := s.closed
	s.closed = true
	s.mu.Unlock()
	if was {
		return nil
	}
	s.pending.Wait()
	// Everything into the file, and the WAL emptied: a stopped
	// executor's store is one self-contained file (to copy, back up or
	// check). SQLite would do this as the last connection closes, but
	// only if it gets the file to itself then, which it did not in the
	// executor process (its WAL was left whole after every clean stop).
	if _, err := s.wc.ExecContext(context.Background(), `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		slog.Default().Debug("checkpointing the store at close failed", "err", err)
	}
	err := errors.Join(s.wc.Close(), s.w.Close(), s.r.Close())
	if s.wal != nil {
		s.wal.Close()
	}
	return err
}
