package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gloveboxhq/glovebox"
)

// Suspended states in the CLI (issue 24). A state the CLI writes is a
// file of one JSON line, the header, then the library's sealed state
// (glovebox.Result.State or Session.Suspend's bytes). The header is
// advice in the clear: which tools needed approval (resume marks them
// again, so the Runtime matches and a later call of one pauses again),
// the tool names (to name a mismatch) and what the state holds. Nothing
// in it is trusted: the sealed state names the tools, their schemas and
// approval, and a header changed to mark other tools makes the state
// refused as made by another Runtime. A file that starts with the sealed
// form's magic ("GBst") is read as a bare library state.
//
// The key: GLOVEBOX_STATE_KEY (64 hex digits), else --state-key FILE,
// else state.key in the cache directory, made on first use (0600; a
// key file anyone else may read is refused, as ssh refuses such keys).
// The key's id is "cli-" and the first 12 hex digits of its SHA-256, so
// a state sealed with another key says which.

// envStateKey gives the CLI's state key as 64 hex digits.
const envStateKey = "GLOVEBOX_STATE_KEY"

// stateHeader is a CLI state file's first line.
type stateHeader struct {
	Format  int      `json:"glovebox_state"`
	Kind    string   `json:"kind"` // "eval" (paused in a call) or "session" (a saved REPL session)
	Approve []string `json:"approve,omitempty"`
	Tools   []string `json:"tools"`
}

const (
	stateFileFormat = 1
	kindEval        = "eval"
	kindSession     = "session"
)

// stateFlags are the flags eval, resume and repl share for states.
type stateFlags struct {
	keyFile string
}

func (s *stateFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.keyFile, "state-key", "", "file holding the key that seals and opens suspended states: 64 hex digits (default: "+envStateKey+", else state.key in the glovebox cache directory, made on first use)")
}

// keyring returns the CLI's keyring, making the default key on first use.
func (s *stateFlags) keyring() (*glovebox.Keyring, error) {
	secret, err := s.secret()
	if err != nil {
		return nil, err
	}
	return glovebox.NewKeyring(glovebox.StateKey{ID: keyID(secret), Secret: secret})
}

// secret returns the CLI's state key (32 bytes), making the default key
// on first use.
func (s *stateFlags) secret() ([]byte, error) {
	var secret []byte
	var err error
	switch {
	case os.Getenv(envStateKey) != "":
		secret, err = parseKey(os.Getenv(envStateKey))
		if err != nil {
			return nil, usageError{fmt.Errorf("%s: %w", envStateKey, err)}
		}
	case s.keyFile != "":
		if secret, err = readKeyFile(s.keyFile); err != nil {
			return nil, usageError{fmt.Errorf("--state-key: %w", err)}
		}
	default:
		dir, err := glovebox.DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		if secret, err = defaultKey(filepath.Join(dir, "state.key")); err != nil {
			return nil, err
		}
	}
	return secret, nil
}

// keyID names a key by its secret: "cli-" and the first 12 hex digits
// of its SHA-256.
func keyID(secret []byte) string {
	sum := sha256.Sum256(secret)
	return "cli-" + hex.EncodeToString(sum[:6])
}

func parseKey(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != 32 {
		return nil, errors.New("a state key is 64 hex digits (32 random bytes), such as the output of: openssl rand -hex 32")
	}
	return b, nil
}

// readKeyFile reads a key file, refusing one that others may read.
func readKeyFile(path string) ([]byte, error) { return readKeyFileMode(path, 0o077) }

// readKeyFileMode reads a key file, refusing one with any permission bit
// of deny set.
func readKeyFileMode(path string, deny os.FileMode) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&deny != 0 {
		alone := "you alone (chmod 600 %s)"
		if deny == 0o007 {
			alone = "its owner and group alone (chmod 640 %s; a Kubernetes Secret volume: defaultMode 0440)"
		}
		return nil, fmt.Errorf("%s may be read by others (mode %04o): make it readable by "+alone, path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := parseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// defaultKey reads path, or makes it (mode 0600, exclusively, so two
// first uses at once agree on one key).
func defaultKey(path string) ([]byte, error) {
	if k, err := readKeyFile(path); !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return nil, fmt.Errorf("glovebox: the state key: %w", err)
		}
		return k, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("glovebox: the state key: %w", err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state.key-*")
	if err != nil {
		return nil, fmt.Errorf("glovebox: the state key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(secret) + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path) // fails if another process made it first
	}
	if errors.Is(err, fs.ErrExist) {
		return readKeyFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("glovebox: making the state key %s: %w", path, err)
	}
	return secret, nil
}

// readStateFile reads a state file: its header (nil for a bare library
// state) and the sealed state.
func readStateFile(path string) (*stateHeader, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, usageError{err}
	}
	if bytes.HasPrefix(b, []byte("GBst")) {
		return nil, b, nil
	}
	line, state, ok := bytes.Cut(b, []byte("\n"))
	var h stateHeader
	if !ok || json.Unmarshal(line, &h) != nil || h.Format == 0 {
		return nil, nil, fmt.Errorf("%s is not a glovebox state file (it should start with a glovebox_state header line, or be a bare state)", path)
	}
	if h.Format != stateFileFormat {
		return nil, nil, fmt.Errorf("%s is a state file of format %d; this glovebox reads format %d", path, h.Format, stateFileFormat)
	}
	return &h, state, nil
}

// writeStateFile writes a state file atomically, readable by its user
// alone (a state holds what the guest had in memory, sealed).
func writeStateFile(path, kind string, rt *glovebox.Runtime, approve []string, state []byte) error {
	h := stateHeader{Format: stateFileFormat, Kind: kind, Approve: approve, Tools: rt.Tools()}
	if h.Tools == nil {
		h.Tools = []string{}
	}
	line, _ := json.Marshal(h)
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".glovebox-state-*")
	if err != nil {
		return fmt.Errorf("writing the state: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(append(line, '\n'), state...))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing the state to %s: %w", path, err)
	}
	return nil
}

// stateError explains a refused state, exit 2: a mismatch names the
// difference (for tools, the tools that differ) and the flags to give, a
// damaged state or another key says so.
func stateError(path string, err error) error {
	var sm *glovebox.StateMismatchError
	msg := strings.TrimPrefix(err.Error(), "glovebox: ")
	switch {
	case errors.As(err, &sm) && sm.What == "tools":
		return fmt.Errorf("%s: %s\ngive the same --mcp-server, --mcp-url, --http-allow, --approve and --profile as the command that wrote it", path, msg)
	case errors.As(err, &sm):
		return fmt.Errorf("%s: %s\ngive the same --mount, limit flags and --profile as the command that wrote it", path, msg)
	case errors.Is(err, glovebox.ErrStateInvalid):
		return fmt.Errorf("%s: %s (nothing ran)", path, msg)
	case errors.Is(err, glovebox.ErrStateKey):
		return fmt.Errorf("%s: %s: it was written with another state key (see --state-key and %s); nothing ran", path, msg, envStateKey)
	case errors.Is(err, glovebox.ErrStateDiverged):
		return fmt.Errorf("%s: %s\nnothing after the pause ran and %s is not used up: resume it again once what changed is back (a mounted file the program read before its call, say)", path, msg, path)
	}
	return err
}
