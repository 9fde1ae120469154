package bench

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/image"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// The programs rows: well-known benchmark programs in pure Ruby (the
// standard library at most), written for glovebox from the published
// descriptions of the tasks, each timed inside the guest in three places
// in the same run: glovebox (a fresh VM per run, no fuel budget), native
// ruby, and the same ruby.wasm image under Node (the @ruby/wasm-wasi
// package, ruby.wasm's own JavaScript host, on V8). Each program file
// defines bench(n), which does the work for size n and returns a check
// value; the three must agree on it.

//go:embed programs/*.rb
var programFiles embed.FS

// A program is one row of the suite.
type program struct {
	file  string // under programs/
	title string // the row's figure
	n     int    // the size of a timed run
	warm  int    // the size of the untimed run before the first timed one
}

// programSuite is the suite, sized so that native ruby takes 0.1 to 0.2 s
// a run on the 2-core machine the bench was written on.
var programSuite = []program{
	{"nbody.rb", "n-body, 10,000 steps", 10_000, 500},
	{"binary_trees.rb", "binary-trees, depth 12", 12, 6},
	{"fannkuch.rb", "fannkuch-redux, n = 8", 8, 6},
	{"spectral_norm.rb", "spectral-norm, n = 100", 100, 20},
	{"mandelbrot.rb", "mandelbrot, 128 x 128", 128, 16},
	{"json_round_trip.rb", "JSON round trip, 100 documents of 14 KB", 100, 5},
	{"cpu8.rb", "8-bit CPU interpreter (Optcarrot-like), 80 x 1,540 instructions", 80, 5},
}

// programReps is how many timed runs each program gets in each place; the
// row gives the median.
const programReps = 3

// programTimer defines gb_program_time(n): the seconds bench(n) takes and
// its check value, as "seconds value".
const programTimer = `
def gb_program_time(n)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  r = bench(n)
  format("%.6f %s", Process.clock_gettime(Process::CLOCK_MONOTONIC) - t, r)
end
`

// programSource returns the program's source with the timer appended.
func programSource(p program) (string, error) {
	b, err := programFiles.ReadFile("programs/" + p.file)
	if err != nil {
		return "", err
	}
	return string(b) + programTimer, nil
}

// timing is one timed run: its seconds and check value.
type timing struct {
	d     time.Duration
	check string
}

// parseTiming reads "seconds value".
func parseTiming(s string) (timing, error) {
	secs, check, _ := strings.Cut(strings.TrimSpace(s), " ")
	f, err := strconv.ParseFloat(secs, 64)
	if err != nil {
		return timing{}, fmt.Errorf("unexpected timing %q", s)
	}
	return timing{time.Duration(f * float64(time.Second)), check}, nil
}

// benchPrograms adds a row per program (glovebox's median beside native
// ruby's and Node's, with both ratios) and a row of the geometric means
// of the ratios to native ruby. rt is a Runtime with no fuel budget.
func benchPrograms(ctx context.Context, rt *glovebox.Runtime, row Row) error {
	srcs := make([]string, len(programSuite))
	for i, p := range programSuite {
		s, err := programSource(p)
		if err != nil {
			return err
		}
		srcs[i] = s
	}
	// glovebox: a fresh VM per run.
	gb := make([][]timing, len(programSuite))
	for i, p := range programSuite {
		for range programReps {
			s, err := evalValue(ctx, rt, p.file, srcs[i]+fmt.Sprintf("bench(%d)\ngb_program_time(%d)\n", p.warm, p.n))
			if err != nil {
				return err
			}
			t, err := parseTiming(s)
			if err != nil {
				return fmt.Errorf("program %s: %w", p.file, err)
			}
			gb[i] = append(gb[i], t)
		}
	}
	native, nativeVer, nativeErr := nativePrograms(ctx, srcs)
	node, nodeErr := nodePrograms(ctx, srcs)

	var rn, rj []float64 // ratios to native ruby: glovebox's, Node's
	for i, p := range programSuite {
		g := medianTiming(gb[i])
		base := []string{}
		ratio := []string{}
		if nativeErr == nil {
			n := medianTiming(native[i])
			if n.check != g.check {
				return fmt.Errorf("program %s: glovebox answered %q, native ruby %q", p.file, g.check, n.check)
			}
			base = append(base, "native ruby "+ms(n.d))
			r := float64(g.d) / float64(n.d)
			rn = append(rn, r)
			ratio = append(ratio, fmt.Sprintf("%.1fx native", r))
		}
		if nodeErr == nil {
			j := medianTiming(node[i])
			if j.check != g.check {
				return fmt.Errorf("program %s: glovebox answered %q, Node %q", p.file, g.check, j.check)
			}
			base = append(base, "Node "+ms(j.d))
			ratio = append(ratio, fmt.Sprintf("%.2fx Node", float64(g.d)/float64(j.d)))
			if nativeErr == nil {
				rj = append(rj, float64(j.d)/float64(medianTiming(native[i]).d))
			}
		}
		if len(base) == 0 {
			base, ratio = []string{"-"}, []string{"-"}
		}
		row("-", fmt.Sprintf("program: %s (median of %d)", p.title, programReps), ms(g.d), strings.Join(base, ", "), strings.Join(ratio, ", "), "-")
	}
	name := fmt.Sprintf("programs: geometric mean of the ratios to native ruby (%d programs)", len(programSuite))
	switch {
	case nativeErr != nil:
		row("-", name, "skipped: native ruby: "+nativeErr.Error(), "-", "-", "-")
	case nodeErr != nil:
		row("-", name, fmt.Sprintf("glovebox %.2fx", geomean(rn)), "Node: "+nodeErr.Error(), "-", "-")
	default:
		row("-", name, fmt.Sprintf("glovebox %.2fx", geomean(rn)), fmt.Sprintf("ruby.wasm under Node %.2fx (native ruby %s)", geomean(rj), nativeVer),
			fmt.Sprintf("%.2fx Node", geomean(rn)/geomean(rj)), "-")
	}
	return nil
}

// evalValue runs code in rt and returns its value, a String. Errors: the
// eval's own, or a status other than ok (naming what).
func evalValue(ctx context.Context, rt *glovebox.Runtime, what, code string) (string, error) {
	res, err := rt.Eval(ctx, code)
	if err != nil {
		return "", err
	}
	if res.Status != glovebox.StatusOK {
		return "", fmt.Errorf("%s ended %s: %+v", what, res.Status, res.Error)
	}
	s, _ := res.Value.(string)
	return s, nil
}

// medianTiming is the run of median duration (runs is not empty).
func medianTiming(runs []timing) timing {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b timing) int { return int(a.d - b.d) })
	return s[len(s)/2]
}

func geomean(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	var s float64
	for _, v := range x {
		s += math.Log(v)
	}
	return math.Exp(s / float64(len(x)))
}

// nativePrograms times each program programReps times in one native ruby
// process per program, after its warm-up run, and returns the runs and
// ruby's version. Errors: ruby is not on PATH, or a program fails.
func nativePrograms(ctx context.Context, srcs []string) ([][]timing, string, error) {
	ruby, err := exec.LookPath("ruby")
	if err != nil {
		return nil, "", errors.New("not on PATH")
	}
	ver, _ := spawn.Output(exec.CommandContext(ctx, ruby, "-e", "print RUBY_VERSION"))
	out := make([][]timing, len(srcs))
	for i, p := range programSuite {
		code := srcs[i] + fmt.Sprintf("bench(%d)\n%d.times { puts gb_program_time(%d) }\n", p.warm, programReps, p.n)
		b, err := spawn.Output(exec.CommandContext(ctx, ruby, "--disable-gems", "-e", code))
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", p.file, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			t, err := parseTiming(l)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", p.file, err)
			}
			out[i] = append(out[i], t)
		}
		if len(out[i]) != programReps {
			return nil, "", fmt.Errorf("%s: %d timings, want %d", p.file, len(out[i]), programReps)
		}
	}
	return out, string(ver), nil
}

// nodeRunner runs a list of {code} jobs, in order, in one ruby.wasm VM
// made by @ruby/wasm-wasi's Node entry point from the image named by its
// argument, and prints each job's result on a line of its own.
const nodeRunner = `import { readFileSync } from "node:fs";
import { DefaultRubyVM } from "@ruby/wasm-wasi/dist/node";
const jobs = JSON.parse(readFileSync(0, "utf8"));
const { vm } = await DefaultRubyVM(await WebAssembly.compile(readFileSync(process.argv[1])));
for (const j of jobs) console.log(vm.eval(j).toString());
`

// nodePrograms times each program programReps times in one Node process
// running the pinned image with ruby.wasm's own host (the program's first
// job also defines it and runs its warm-up). Errors: node, the package or
// the image is not to be had, or a program fails.
func nodePrograms(ctx context.Context, srcs []string) ([][]timing, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("not installed")
	}
	dir, err := rubyWasmDir(ctx)
	if err != nil {
		return nil, err
	}
	cacheDir, err := glovebox.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	img, err := image.Path(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	var jobs []string
	for i, p := range programSuite {
		for k := range programReps {
			job := fmt.Sprintf("gb_program_time(%d)", p.n)
			if k == 0 {
				job = srcs[i] + fmt.Sprintf("bench(%d)\n", p.warm) + job
			}
			jobs = append(jobs, job)
		}
	}
	in, err := json.Marshal(jobs)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, node, "--no-warnings", "--input-type=module", "-e", nodeRunner, img)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(string(in))
	b, err := spawn.Output(cmd)
	if err != nil {
		return nil, fmt.Errorf("it does not run here: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(jobs) {
		return nil, fmt.Errorf("%d results for %d runs", len(lines), len(jobs))
	}
	out := make([][]timing, len(srcs))
	for k, l := range lines {
		t, err := parseTiming(l)
		if err != nil {
			return nil, err
		}
		out[k/programReps] = append(out[k/programReps], t)
	}
	return out, nil
}

// rubyWasmVersion is the @ruby/wasm-wasi release the Node rows install
// when none is found: the host package of the same ruby.wasm release as
// the pinned image (image.Version).
const rubyWasmVersion = "2.10.1"

// rubyWasmDir returns a directory whose node_modules holds
// @ruby/wasm-wasi: "bench-peers" under glovebox's cache directory, where
// npm installs rubyWasmVersion on first use (a few seconds, said on
// stderr). Errors: the package is missing and npm is not installed, or
// its install failed (npm's last line in the message).
func rubyWasmDir(ctx context.Context) (string, error) {
	cache, err := glovebox.DefaultCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "bench-peers")
	pkg := "@ruby/wasm-wasi"
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err == nil {
		return dir, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("%s is not installed and npm is not there to install it", pkg)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "glovebox: installing %s@%s with npm into %s for the Node rows...\n", pkg, rubyWasmVersion, dir)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := spawn.CombinedOutput(exec.CommandContext(cctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
		"--prefix", dir, pkg+"@"+rubyWasmVersion))
	if err != nil {
		return "", fmt.Errorf("npm install %s@%s failed: %v: %s", pkg, rubyWasmVersion, err, lastLine(string(out)))
	}
	return dir, nil
}
