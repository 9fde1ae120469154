// Command release builds glovebox's installable artifacts from this
// repository (`make gem` runs it; README.md, "Install"):
//
//   - ruby/pkg/glovebox-VERSION-x86_64-linux.gem and
//     glovebox-VERSION-aarch64-linux.gem: the Ruby gem with the glovebox
//     binary for its platform, the pinned Ruby image and that image
//     compiled for the platform (plain and fuel-metered) packed under
//     lib/glovebox/native/, so neither Go nor npm nor a compile is needed
//     at install or run time; and glovebox-VERSION.gem, the plain gem for
//     every other platform (remote mode, or a glovebox from $GLOVEBOX_BIN
//     or PATH);
//   - dist/glovebox-VERSION-linux-amd64.tar.gz and -linux-arm64.tar.gz:
//     the binary, the image and the compiled image side by side, with a
//     README and a licence note, for `glovebox mcp` and the CLI without
//     Go or npm;
//   - a SHA256SUMS file in each of the two directories.
//
// The binaries are built with cgo (wasmtime's static library), the arm64
// one with a cross C compiler (Debian's gcc-aarch64-linux-gnu on an
// x86-64 host), with -trimpath, stripped, and linked statically (the
// netgo and osusergo tags keep the C library's resolver and user lookup
// out), so that one binary runs on any Linux distribution of its
// architecture, glibc or musl. Each binary's ELF machine is checked
// before it is packed. The image is the pinned npm package's
// ruby+stdlib.wasm from the glovebox cache, checked against its pinned
// SHA-256, or fetched with npm (and checked against the package's pinned
// integrity) when the cache lacks it.
//
// Each binary compiles its own architecture's modules (`glovebox
// precompile`: wasmtime's library compiles for its own architecture only,
// so the arm64 binary runs under qemu-aarch64-static, Debian's
// qemu-user-static: about 13 minutes of CPU); then it is linked again
// with their SHA-256 stamped in, so it uses those files and no others.
// The modules are kept in the glovebox cache's release/ directory under
// names carrying their cache key, and reused by later builds of the same
// image, wasmtime and engine settings.
//
// Usage:
//
//	go run ./internal/release [-arch amd64,arm64] [-version V] [-precompile amd64,arm64]
//
// VERSION defaults to the gem's (ruby/lib/glovebox/version.rb). The C
// compiler for a cross build is $CC_<arch> (CC_arm64, CC_amd64) when set,
// else x86_64-linux-gnu-gcc or aarch64-linux-gnu-gcc.
package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"flag"
	"fmt"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox/internal/image"
	"github.com/gloveboxhq/glovebox/internal/shipped"
)

// target is one platform the release builds for.
type target struct {
	goarch  string      // GOARCH
	gem     string      // Gem::Platform of its gem
	machine elf.Machine // the binary's ELF machine
	cross   string      // the C cross compiler's name on another host
	uname   string      // the architecture as uname -m says it
}

// qemu is the qemu-user emulator that runs t's binary on another host
// (Debian's qemu-user-static).
func (t target) qemu() string { return "qemu-" + t.uname + "-static" }

var targets = []target{
	{"amd64", "x86_64-linux", elf.EM_X86_64, "x86_64-linux-gnu-gcc", "x86_64"},
	{"arm64", "aarch64-linux", elf.EM_AARCH64, "aarch64-linux-gnu-gcc", "aarch64"},
}

func main() {
	arches := flag.String("arch", "amd64,arm64", "the GOARCH values to build, comma-separated")
	version := flag.String("version", "", "the version to stamp (default: the gem's)")
	pre := flag.String("precompile", "amd64,arm64", "the GOARCH values whose gem and archive ship the compiled Ruby image "+
		"(another architecture's is compiled under qemu-user: tens of minutes on 2 cores unless cached); the others compile it on first use")
	flag.Parse()
	if err := run(*arches, *version, strings.Split(*pre, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(arches, version string, pre []string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if version == "" {
		if version, err = gemVersion(root); err != nil {
			return err
		}
	}
	var todo []target
	for _, a := range strings.Split(arches, ",") {
		i := slices.IndexFunc(targets, func(t target) bool { return t.goarch == a })
		if i < 0 {
			return fmt.Errorf("unknown -arch %q (amd64, arm64)", a)
		}
		todo = append(todo, targets[i])
	}
	pkg, dist := filepath.Join(root, "ruby", "pkg"), filepath.Join(root, "dist")
	work := filepath.Join(pkg, "work")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	for _, d := range []string{work, dist} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	img, err := pinnedImage()
	if err != nil {
		return err
	}
	var gems, archives []string
	for _, t := range todo {
		bin := filepath.Join(work, "linux-"+t.goarch, "glovebox")
		if err := build(root, t, version, bin, nil); err != nil {
			return err
		}
		// The compiled modules, made by the binary itself (its wasmtime,
		// its settings), then stamped into it: built again with their
		// hashes, the binary trusts those files and no others.
		var compiled []module
		if slices.Contains(pre, t.goarch) {
			if compiled, err = precompile(t, bin, img); err != nil {
				return err
			}
			if err := build(root, t, version, bin, compiled); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(os.Stderr, "release: linux/%s ships without the compiled Ruby image (-precompile): it compiles on first use\n", t.goarch)
		}
		g, err := platformGem(root, work, pkg, t, bin, img, compiled)
		if err != nil {
			return err
		}
		a, err := archive(root, dist, t, version, bin, img, compiled)
		if err != nil {
			return err
		}
		gems, archives = append(gems, g), append(archives, a)
	}
	g, err := gem(root, filepath.Join(work, "gem-ruby"), pkg, "", nil)
	if err != nil {
		return err
	}
	gems = append(gems, g)
	if err := sums(pkg, gems); err != nil {
		return err
	}
	if err := sums(dist, archives); err != nil {
		return err
	}
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	for _, f := range append(gems, archives...) {
		st, err := os.Stat(f)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Printf("%-50s %6.2f MB\n", rel, float64(st.Size())/1e6)
	}
	return nil
}

// repoRoot is the module root: the directory holding go.mod, from the
// working directory up.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod above the working directory: run from the repository")
		}
		d = up
	}
}

// gemVersion reads VERSION from ruby/lib/glovebox/version.rb.
func gemVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "ruby", "lib", "glovebox", "version.rb"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*VERSION\s*=\s*"([0-9A-Za-z.\-]+)"`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("no VERSION = \"...\" in ruby/lib/glovebox/version.rb")
	}
	return string(m[1]), nil
}

// pinnedImage is the pinned Ruby image, from the glovebox cache or
// fetched with npm into it, checked against its SHA-256 either way. It
// never takes $GLOVEBOX_IMAGE: a release packs the pinned image only.
func pinnedImage() (string, error) {
	cache, err := cacheRoot()
	if err != nil {
		return "", err
	}
	p := image.CachedPath(cache)
	if image.Verify(p) != nil {
		fmt.Fprintf(os.Stderr, "release: fetching %s@%s with npm...\n", image.Package, image.Version)
		if err := image.Fetch(context.Background(), cache); err != nil {
			return "", err
		}
	}
	if err := image.Verify(p); err != nil {
		return "", err
	}
	return p, nil
}

// cacheRoot is the glovebox cache: $GLOVEBOX_CACHE_DIR, else the user's.
func cacheRoot() (string, error) {
	if c := os.Getenv("GLOVEBOX_CACHE_DIR"); c != "" {
		return c, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set GLOVEBOX_CACHE_DIR): %w", err)
	}
	return filepath.Join(d, "glovebox"), nil
}

// module is a compiled module shipped beside the binary.
type module struct {
	name string // its file name in the gem and the archive
	path string // where it is on disk
	sum  string // its hex SHA-256
}

// precompile has bin, t's binary, compile the Ruby image img for its
// architecture (`glovebox precompile`: the plain and the fuel-metered
// variant), running it under qemu-user when t is not this host's
// architecture (wasmtime's library compiles for its own only). The files
// are kept in the glovebox cache's release/ directory under names that
// carry their cache key, so a later release of the same image, wasmtime
// and settings reuses them instead of compiling again (minutes natively,
// much longer under emulation).
func precompile(t target, bin, img string) ([]module, error) {
	cache, err := cacheRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "release", "linux-"+t.goarch)
	runner := []string{bin}
	if t.goarch != runtime.GOARCH {
		q, err := exec.LookPath(t.qemu())
		if err != nil {
			return nil, fmt.Errorf("compiling the Ruby image for linux/%s runs its glovebox under %s, which is not installed "+
				"(Debian: apt-get install -y qemu-user-static): %w", t.goarch, t.qemu(), err)
		}
		runner = []string{q, bin}
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(runner[0], append(append(runner[1:], "precompile", "--image", img), args...)...)
		var stderr strings.Builder
		cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
		out, err := spawn.Output(cmd)
		if err != nil {
			return "", fmt.Errorf("glovebox precompile for linux/%s: %v\n%s", t.goarch, err, stderr.String())
		}
		return string(out), nil
	}
	out, err := run("--names", dir)
	if err != nil {
		return nil, err
	}
	names := strings.Fields(out)
	if len(names) == 0 {
		return nil, fmt.Errorf("glovebox precompile --names for linux/%s printed nothing", t.goarch)
	}
	var have []module
	for _, n := range names {
		p := filepath.Join(dir, n)
		sum, err := image.FileSHA256(p)
		if err != nil {
			break
		}
		have = append(have, module{n, p, sum})
	}
	if len(have) == len(names) {
		fmt.Fprintf(os.Stderr, "release: linux/%s: the compiled modules are in %s already\n", t.goarch, dir)
		return have, nil
	}
	start := time.Now()
	how := "natively"
	if len(runner) > 1 {
		how = "under " + t.qemu() + " (slow: tens of minutes on 2 cores)"
	}
	fmt.Fprintf(os.Stderr, "release: compiling the Ruby image for linux/%s %s...\n", t.goarch, how)
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if out, err = run(tmp); err != nil {
		return nil, err
	}
	var mods []module
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || !slices.Contains(names, f[0]) {
			return nil, fmt.Errorf("glovebox precompile for linux/%s: unexpected line %q (names %v)", t.goarch, l, names)
		}
		sum, err := image.FileSHA256(filepath.Join(tmp, f[0]))
		if err != nil {
			return nil, err
		}
		if sum != f[1] {
			return nil, fmt.Errorf("%s: SHA-256 %s, but glovebox precompile printed %s", f[0], sum, f[1])
		}
		mods = append(mods, module{name: f[0], sum: sum})
	}
	if len(mods) != len(names) {
		return nil, fmt.Errorf("glovebox precompile for linux/%s made %d modules, want %d", t.goarch, len(mods), len(names))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i := range mods {
		mods[i].path = filepath.Join(dir, mods[i].name)
		if err := os.Rename(filepath.Join(tmp, mods[i].name), mods[i].path); err != nil {
			return nil, err
		}
	}
	os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "release: linux/%s: compiled in %.0fs\n", t.goarch, time.Since(start).Seconds())
	return mods, nil
}

// build compiles cmd/glovebox for t into out and checks the result's ELF
// machine. The hashes of compiled (the shipped modules) are stamped into
// it (shipped.SumsVar).
func build(root string, t target, version, out string, compiled []module) error {
	cc := os.Getenv("CC_" + t.goarch)
	if cc == "" {
		cc = "gcc"
		if runtime.GOARCH != t.goarch || runtime.GOOS != "linux" {
			cc = t.cross
		}
	}
	if _, err := exec.LookPath(cc); err != nil {
		return fmt.Errorf("the C compiler for linux/%s, %s, is not installed (Debian: apt-get install -y gcc-%s-linux-gnu; or set CC_%s): %w",
			t.goarch, cc, t.uname, t.goarch, err)
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "release: building glovebox %s for linux/%s with %s (minutes on a cold build cache)...\n", version, t.goarch, cc)
	sums := map[string]string{}
	for _, m := range compiled {
		sums[m.name] = m.sum
	}
	ldflags := "-s -w -X main.version=" + version + " -linkmode external -extldflags -static"
	if len(sums) > 0 {
		ldflags += " -X " + shipped.SumsVar + "=" + shipped.Format(sums)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "netgo,osusergo", "-ldflags", ldflags, "-o", out, "./cmd/glovebox")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOOS=linux", "GOARCH="+t.goarch, "CC="+cc)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := spawn.Run(cmd); err != nil {
		return fmt.Errorf("go build for linux/%s: %v\n%s", t.goarch, err, log.String())
	}
	// The static glibc link warns about getpwuid_r, getaddrinfo and
	// dlopen in wasmtime's library: code paths glovebox does not take
	// (wasmtime's own cache, WASI sockets, VTune); other output is news.
	if rest := unexpectedLinkOutput(log.String()); rest != "" {
		fmt.Fprint(os.Stderr, rest)
	}
	f, err := elf.Open(out)
	if err != nil {
		return fmt.Errorf("the linux/%s binary: %w", t.goarch, err)
	}
	defer f.Close()
	if f.Machine != t.machine || f.Class != elf.ELFCLASS64 {
		return fmt.Errorf("the linux/%s binary is %v %v, want %v", t.goarch, f.Class, f.Machine, t.machine)
	}
	if slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		return fmt.Errorf("the linux/%s binary is dynamically linked, want static", t.goarch)
	}
	fmt.Fprintf(os.Stderr, "release: linux/%s: %s, static, in %.0fs\n", t.goarch, t.machine, time.Since(start).Seconds())
	return nil
}

// unexpectedLinkOutput drops the linker's known static-glibc warnings
// (and the lines naming where they come from) from out.
func unexpectedLinkOutput(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case l == "", strings.HasPrefix(l, "# "), strings.Contains(l, "in function `"),
			strings.Contains(l, "in statically linked applications requires at runtime"):
		default:
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return ""
	}
	return strings.Join(keep, "\n") + "\n"
}

// platformGem builds t's platform gem with bin, img and the compiled
// modules packed.
func platformGem(root, work, pkg string, t target, bin, img string, compiled []module) (string, error) {
	files := map[string]string{
		"lib/glovebox/native/glovebox":            bin,
		"lib/glovebox/native/" + image.BesideName: img,
	}
	for _, m := range compiled {
		files["lib/glovebox/native/"+m.name] = m.path
	}
	return gem(root, filepath.Join(work, "gem-"+t.gem), pkg, t.gem, files)
}

// gem stages the gem's files in stage (the gemspec, lib, exe, examples, README)
// plus extra (path in the gem: file on disk), runs `gem build` there with
// GLOVEBOX_GEM_PLATFORM=platform, and moves the gem into pkg.
func gem(root, stage, pkg, platform string, extra map[string]string) (string, error) {
	src := filepath.Join(root, "ruby")
	for _, p := range []string{"glovebox.gemspec", "README.md", "lib", "exe", "examples"} {
		if err := copyTree(filepath.Join(src, p), filepath.Join(stage, p)); err != nil {
			return "", err
		}
	}
	// A native/ directory left in the source tree by hand is not packed:
	// only what this build made.
	if err := os.RemoveAll(filepath.Join(stage, "lib", "glovebox", "native")); err != nil {
		return "", err
	}
	for dst, from := range extra {
		if err := copyFile(from, filepath.Join(stage, dst)); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("gem", "build", "glovebox.gemspec")
	cmd.Dir = stage
	cmd.Env = append(os.Environ(), "GLOVEBOX_GEM_PLATFORM="+platform)
	out, err := spawn.CombinedOutput(cmd)
	if err != nil {
		return "", fmt.Errorf("gem build (platform %q): %v\n%s", platform, err, out)
	}
	m := regexp.MustCompile(`(?m)^\s*File:\s*(\S+\.gem)\s*$`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("gem build printed no File: line:\n%s", out)
	}
	dst := filepath.Join(pkg, string(m[1]))
	if err := os.Rename(filepath.Join(stage, string(m[1])), dst); err != nil {
		return "", err
	}
	return dst, nil
}

// archive writes dist/glovebox-VERSION-linux-ARCH.tar.gz: one directory
// of that name holding the binary, the image, a README and a licence note.
func archive(root, dist string, t target, version, bin, img string, compiled []module) (string, error) {
	name := "glovebox-" + version + "-linux-" + t.goarch
	path := filepath.Join(dist, name+".tar.gz")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	// Fixed times and owners: the same inputs make the same archive.
	mtime := time.Unix(sourceDate(), 0)
	add := func(n string, mode int64, r io.Reader, size int64) error {
		h := &tar.Header{Name: name + "/" + n, Mode: mode, Size: size, ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	type file struct {
		name string
		path string
		mode int64
	}
	files := []file{{"glovebox", bin, 0o755}, {image.BesideName, img, 0o644}}
	for _, m := range compiled {
		files = append(files, file{m.name, m.path, 0o644})
	}
	for _, fl := range files {
		src, err := os.Open(fl.path)
		if err != nil {
			return "", err
		}
		st, err := src.Stat()
		if err == nil {
			err = add(fl.name, fl.mode, src, st.Size())
		}
		src.Close()
		if err != nil {
			return "", err
		}
	}
	for n, text := range map[string]string{"README.txt": archiveReadme(version, t), "NOTICE.txt": notice} {
		if err := add(n, 0o644, strings.NewReader(text), int64(len(text))); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return path, f.Close()
}

// sourceDate is $SOURCE_DATE_EPOCH when set (the reproducible-builds
// convention), else 2026-01-01T00:00:00Z.
func sourceDate() int64 {
	var n int64
	if _, err := fmt.Sscan(os.Getenv("SOURCE_DATE_EPOCH"), &n); err == nil && n > 0 {
		return n
	}
	return 1767225600
}

func archiveReadme(version string, t target) string {
	return fmt.Sprintf(`glovebox %s for Linux on %s (kernel 5.14 or newer)

glovebox runs untrusted Ruby (CRuby 4.0 compiled to WebAssembly, under
wasmtime) with only the functions, folders and network hosts you grant it.

This directory holds the glovebox binary (static: any distribution) and
the Ruby image it runs, %s (the pinned npm package %s@%s). Keep them side
by side: glovebox uses the image next to itself, so it needs neither Go
nor npm. Put the directory on PATH, or link the binary from one that is.

  ./glovebox setup          compile the Ruby images once (a minute or more)
  ./glovebox eval -e '6 * 7'
  ./glovebox mcp            an MCP server on stdio, for any MCP client

An MCP client's configuration (Claude Desktop, Cursor, VS Code) takes:

  {"mcpServers": {"glovebox": {"command": "/path/to/glovebox", "args": ["mcp"]}}}

Documentation: README.md and docs/ in the glovebox repository.
`, version, t.uname, image.BesideName, image.Package, image.Version)
}

// notice names the licences of what the archive holds.
const notice = `glovebox is licensed under the Apache License, Version 2.0.

The glovebox binary links:
- wasmtime (the C API's static library, through wasmtime-go), from the
  Bytecode Alliance: Apache License 2.0 with LLVM exception.
- Go's standard library and the Go modules listed in the repository's
  go.mod, each under its own licence (BSD-, MIT- and Apache-style).

ruby+stdlib.wasm is the npm package @ruby/4.0-wasm-wasi's build of CRuby
4.0 and its standard library for wasm32-wasi (the ruby.wasm project, MIT
licence): CRuby is under the Ruby licence or the 2-clause BSD licence,
at your choice; its bundled libraries under their own.
`

// sums writes dir/SHA256SUMS for files (in the format sha256sum -c reads).
func sums(dir string, files []string) error {
	var b strings.Builder
	for _, f := range files {
		h := sha256.New()
		r, err := os.Open(f)
		if err != nil {
			return err
		}
		_, err = io.Copy(h, r)
		r.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), filepath.Base(f))
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

// copyFile copies src to dst (directories made), keeping the executable
// bits and making the file readable by all, as gem build packs modes.
func copyFile(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(src) // at most the 45 MB binary
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, st.Mode().Perm()|0o444)
}
