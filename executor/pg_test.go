package executor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// pgBin is the directory of PostgreSQL's server programs (initdb,
// pg_ctl): on PATH, else Debian's /usr/lib/postgresql/N/bin; "" when
// PostgreSQL is not installed.
func pgBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(m) == 0 {
		return ""
	}
	return filepath.Dir(m[len(m)-1])
}

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
	bin := pgBin()
	if bin == "" {
		t.Skip("PostgreSQL is not installed (no initdb on PATH or under /usr/lib/postgresql); .ci/run installs the postgresql package")
	}
	dir, err := os.MkdirTemp("", "gbpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var as []string // the command prefix that drops root
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		rp, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("PostgreSQL refuses to run as root, and setpriv (to run it as nobody) is missing")
		}
		as = []string{rp, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}
	}
	run := func(name string, args ...string) error {
		argv := append(append(as[:len(as):len(as)], filepath.Join(bin, name)), args...)
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v\n%s", name, err, out)
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		t.Skipf("PostgreSQL cannot be set up here: %v", err)
	}
	opts := "-k " + dir + " -c listen_addresses='' -c max_connections=100"
	ctl := &pgCtl{
		start: func() error {
			return run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "start")
		},
		stop: func() error { return run("pg_ctl", "-D", data, "-m", "fast", "-w", "stop") },
	}
	if err := ctl.start(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("%v\n%s", err, log)
	}
	t.Cleanup(func() { run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop") })
	return "postgres://postgres@/postgres?host=" + dir + "&port=" + strconv.Itoa(5432), ctl
}
