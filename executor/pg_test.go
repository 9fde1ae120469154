package executor

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/pgserver"
)

// startPostgres starts a real PostgreSQL server in a temporary directory,
// listening only on a Unix socket there, and stops it when t ends. It
// returns the server's connection URL for a fresh database. PostgreSQL
// refuses to run as root, so as root it runs as nobody. Skips when
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

// startPostgresCtl is startPostgres, with the server's controls.
func startPostgresCtl(t testing.TB) (string, *pgCtl) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gbpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := pgserver.Start(dir)
	if errors.Is(err, pgserver.ErrNotInstalled) || errors.Is(err, pgserver.ErrRoot) {
		t.Skip(err.Error())
	}
	if err != nil && strings.HasPrefix(err.Error(), "initdb") {
		t.Skipf("PostgreSQL cannot be set up here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Kill() })
	return s.URL, &pgCtl{stop: s.Stop, start: s.Start}
}
