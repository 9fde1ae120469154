package executor

import (
	"errors"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/pgtest"
)

// startPostgres starts a real PostgreSQL server in a temporary directory,
// listening only on a Unix socket there (internal/pgtest), and stops it
// when t ends. It returns the server's connection URL. Skips when
// PostgreSQL is not installed or cannot run here.
func startPostgres(t testing.TB) string {
	t.Helper()
	url, _ := startPostgresCtl(t)
	return url
}

// pgCtl stops and starts a test's PostgreSQL server (fault tests).
type pgCtl struct {
	stop, start func() error
}

// startPostgresCtl is startPostgres, with the server's controls: stop
// shuts it down cleanly, start starts it again on the same cluster.
func startPostgresCtl(t testing.TB) (string, *pgCtl) {
	t.Helper()
	pg, err := pgtest.Start()
	if errors.Is(err, pgtest.ErrMissing) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	return pg.URL, &pgCtl{stop: pg.Shutdown, start: pg.StartAgain}
}
