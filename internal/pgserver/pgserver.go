// Package pgserver starts a throw-away PostgreSQL server for tests and
// benchmarks: a cluster made by initdb in a directory, listening on a
// Unix socket there and nowhere else, trusting local connections.
package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// ErrNotInstalled: no initdb on PATH or under Debian's
// /usr/lib/postgresql/N/bin (.ci/run installs the postgresql package).
var ErrNotInstalled = errors.New("PostgreSQL is not installed (no initdb on PATH or under /usr/lib/postgresql); .ci/run installs the postgresql package")

// ErrRoot: PostgreSQL refuses to run as root, and setpriv (to run it as
// nobody) is missing.
var ErrRoot = errors.New("PostgreSQL refuses to run as root, and setpriv (to run it as nobody) is missing")

// Server is a started PostgreSQL server.
type Server struct {
	// URL connects to its database "postgres" as user postgres over the
	// Unix socket (no password).
	URL string
	dir string
	run func(name string, args ...string) error
}

// bin is the directory of PostgreSQL's server programs, or "".
func bin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(m) == 0 {
		return ""
	}
	return filepath.Dir(m[len(m)-1])
}

// Start makes a cluster in dir (which must exist and be empty; as root
// it is given to nobody, uid 65534, who runs the server) and starts it.
// Errors: ErrNotInstalled, ErrRoot, or initdb or pg_ctl failing (the
// message holds their output). Call Kill when done.
func Start(dir string) (*Server, error) {
	b := bin()
	if b == "" {
		return nil, ErrNotInstalled
	}
	var as []string // the command prefix that drops root
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 65534, 65534); err != nil {
			return nil, err
		}
		rp, err := exec.LookPath("setpriv")
		if err != nil {
			return nil, ErrRoot
		}
		as = []string{rp, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}
	}
	s := &Server{dir: dir, URL: "postgres://postgres@/postgres?host=" + dir + "&port=5432"}
	s.run = func(name string, args ...string) error {
		argv := append(append(as[:len(as):len(as)], filepath.Join(b, name)), args...)
		out, err := spawn.CombinedOutput(exec.Command(argv[0], argv[1:]...))
		if err != nil {
			return fmt.Errorf("%s: %v\n%s", name, err, out)
		}
		return nil
	}
	if err := s.run("initdb", "-D", s.data(), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return nil, fmt.Errorf("%v\n%s", err, log)
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// Start starts the server again after Stop, and waits until it accepts
// connections.
func (s *Server) Start() error {
	return s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "log"),
		"-o", "-k "+s.dir+" -c listen_addresses='' -c max_connections=100", "-w", "start")
}

// Stop shuts the server down cleanly (fast: connections are ended,
// committed work is kept) and waits for it to exit.
func (s *Server) Stop() error { return s.run("pg_ctl", "-D", s.data(), "-m", "fast", "-w", "stop") }

// Kill stops the server at once (immediate shutdown); for clean-up.
func (s *Server) Kill() error {
	return s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
}
