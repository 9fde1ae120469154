// Package pgtest starts a real PostgreSQL server in a temporary
// directory, for the executor's tests and the bench's PostgreSQL rows:
// initdb, then pg_ctl start listening only on a Unix socket in that
// directory (no TCP port), trust authentication for the user postgres.
// PostgreSQL refuses to run as root, so as root it runs as nobody
// (65534, through setpriv).
package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Server is one running PostgreSQL server.
type Server struct {
	// URL connects to its postgres database as postgres over the socket:
	// postgres://postgres@/postgres?host=DIR&port=5432.
	URL string

	dir, bin string
	as       []string // the command prefix that drops root
}

// ErrMissing is wrapped by Start's error when PostgreSQL is not
// installed here, or cannot be set up (a caller skips then); any other
// error is a server that was set up and would not start.
var ErrMissing = errors.New("pgtest: PostgreSQL is not available")

// Bin is the directory of PostgreSQL's server programs (initdb, pg_ctl):
// on PATH, else Debian's newest /usr/lib/postgresql/N/bin; "" when
// PostgreSQL is not installed.
func Bin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(m) == 0 {
		return ""
	}
	return filepath.Dir(m[len(m)-1])
}

// Start makes a database cluster in a new temporary directory and starts
// a server on it (max_connections 100). Stop it with Stop, which also
// removes the directory. Errors wrap ErrMissing when PostgreSQL is not
// installed (Debian's postgresql package; .ci/run installs it), setpriv
// is missing as root, or initdb fails; else they carry the server log.
func Start() (*Server, error) {
	bin := Bin()
	if bin == "" {
		return nil, fmt.Errorf("%w: no initdb on PATH or under /usr/lib/postgresql; .ci/run installs the postgresql package", ErrMissing)
	}
	dir, err := os.MkdirTemp("", "gbpg")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 65534, 65534); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		rp, err := exec.LookPath("setpriv")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w: PostgreSQL refuses to run as root, and setpriv (to run it as nobody) is missing", ErrMissing)
		}
		s.as = []string{rp, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}
	}
	data := filepath.Join(dir, "data")
	if err := s.run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: it cannot be set up here: %v", ErrMissing, err)
	}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.URL = "postgres://postgres@/postgres?host=" + dir + "&port=" + strconv.Itoa(5432)
	return s, nil
}

func (s *Server) run(name string, args ...string) error {
	argv := append(append(s.as[:len(s.as):len(s.as)], filepath.Join(s.bin, name)), args...)
	out, err := spawn.CombinedOutput(exec.Command(argv[0], argv[1:]...))
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", name, err, out)
	}
	return nil
}

// Shutdown shuts the server down cleanly (pg_ctl stop -m fast:
// connections are ended, committed work is kept) and waits for it to
// exit; StartAgain starts it again on the same cluster (restart tests).
func (s *Server) Shutdown() error {
	return s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "fast", "-w", "stop")
}

// StartAgain starts the server after Shutdown and waits until it
// accepts connections; its error is pg_ctl's, with the server log.
func (s *Server) StartAgain() error { return s.start() }

// start runs pg_ctl start on the cluster, listening only on the socket.
func (s *Server) start() error {
	opts := "-k " + s.dir + " -c listen_addresses='' -c max_connections=100"
	if err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-l", filepath.Join(s.dir, "log"), "-o", opts, "-w", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("%v\n%s", err, log)
	}
	return nil
}

// Stop stops the server at once (pg_ctl stop -m immediate) and removes
// its directory. Its error is pg_ctl's.
func (s *Server) Stop() error {
	err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(s.dir)
	return err
}

// CPU is the processor time (user and system, in clock ticks of
// 1/100 s, Linux's USER_HZ) the server's processes have used so far:
// the postmaster and every process whose parent it is (backends, the
// WAL writer, the checkpointer), read from /proc. Backends that have
// exited are not counted; 0 when /proc cannot be read.
func (s *Server) CPU() int64 {
	b, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, _, _ := strings.Cut(string(b), "\n")
	ents, _ := os.ReadDir("/proc")
	var total int64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state (3),
		// ppid (4), … utime (14), stime (15).
		i := strings.LastIndexByte(string(st), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 13 || (e.Name() != pm && f[1] != pm) {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		total += u + k
	}
	return total
}
