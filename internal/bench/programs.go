package bench

import (
	"bufio"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// of the ratios to native ruby. rt is a Runtime with no fuel budget. The
// three places take turns, run by run, so that load coming and going on
// a shared machine falls on each alike.
func benchPrograms(ctx context.Context, rt *glovebox.Runtime, row Row) error {
	ruby, nativeErr := exec.LookPath("ruby")
	var nativeVer []byte
	if nativeErr == nil {
		nativeVer, _ = spawn.Output(exec.CommandContext(ctx, ruby, "-e", "print RUBY_VERSION"))
	}
	node, nodeErr := startNodePeer(ctx)
	if node != nil {
		defer node.close()
	}
	var rn, rj []float64 // ratios to native ruby: glovebox's, Node's
	for _, p := range programSuite {
		src, err := programSource(p)
		if err != nil {
			return err
		}
		run := src + fmt.Sprintf("bench(%d)\ngb_program_time(%d)\n", p.warm, p.n)
		var gb, native, js []timing
		for k := range programReps {
			// glovebox: a fresh VM per run.
			s, err := evalValue(ctx, rt, p.file, run)
			if err != nil {
				return err
			}
			t, err := parseTiming(s)
			if err != nil {
				return fmt.Errorf("program %s: %w", p.file, err)
			}
			gb = append(gb, t)
			if nativeErr == nil {
				var out []byte
				if out, nativeErr = spawn.Output(exec.CommandContext(ctx, ruby, "--disable-gems", "-e", "puts begin\n"+run+"end\n")); nativeErr == nil {
					t, nativeErr = parseTiming(string(out))
					native = append(native, t)
				}
			}
			if nodeErr == nil && k == 0 {
				// Node's VM serves the whole suite: define the program,
				// and give V8 one whole run to compile the hot functions
				// with its optimizing tier, untimed.
				_, nodeErr = node.eval(run)
			}
			if nodeErr == nil {
				if s, nodeErr = node.eval(fmt.Sprintf("gb_program_time(%d)", p.n)); nodeErr == nil {
					t, nodeErr = parseTiming(s)
					js = append(js, t)
				}
			}
		}
		g := medianTiming(gb)
		var base, ratio []string
		if nativeErr == nil {
			n := medianTiming(native)
			if n.check != g.check {
				return fmt.Errorf("program %s: glovebox answered %q, native ruby %q", p.file, g.check, n.check)
			}
			base = append(base, "native ruby "+ms(n.d))
			r := float64(g.d) / float64(n.d)
			rn = append(rn, r)
			ratio = append(ratio, fmt.Sprintf("%.1fx native", r))
			if nodeErr == nil {
				rj = append(rj, float64(medianTiming(js).d)/float64(n.d))
			}
		}
		if nodeErr == nil {
			j := medianTiming(js)
			if j.check != g.check {
				return fmt.Errorf("program %s: glovebox answered %q, Node %q", p.file, g.check, j.check)
			}
			base = append(base, "Node "+ms(j.d))
			ratio = append(ratio, fmt.Sprintf("%.2fx Node", float64(g.d)/float64(j.d)))
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

// nodeRunner reads Ruby programs, one JSON string a line, and runs each
// in one ruby.wasm VM made by @ruby/wasm-wasi's Node entry point from the
// image named by its argument, printing each result (or the error) as a
// JSON string on a line of its own, after a first line when it is ready.
const nodeRunner = `import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { DefaultRubyVM } from "@ruby/wasm-wasi/dist/node";
const { vm } = await DefaultRubyVM(await WebAssembly.compile(readFileSync(process.argv[1])));
console.log(JSON.stringify("ready"));
for await (const line of createInterface({ input: process.stdin })) {
  let out;
  try { out = vm.eval(JSON.parse(line)).toString(); } catch (e) { out = "error: " + e; }
  console.log(JSON.stringify(out));
}
`

// nodePeer is a Node process running nodeRunner on the pinned image.
type nodePeer struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	in     io.WriteCloser
	out    *bufio.Scanner
}

// startNodePeer starts a nodePeer and waits for its VM. Errors: node, the
// package or the image is not to be had, or the runner does not start.
func startNodePeer(ctx context.Context) (*nodePeer, error) {
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
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	p := &nodePeer{cmd: exec.CommandContext(cctx, node, "--no-warnings", "--input-type=module", "-e", nodeRunner, img), cancel: cancel}
	p.cmd.Dir = dir
	if p.in, err = p.cmd.StdinPipe(); err == nil {
		var out io.ReadCloser
		if out, err = p.cmd.StdoutPipe(); err == nil {
			p.out = bufio.NewScanner(out)
			p.out.Buffer(nil, 1<<20)
			err = spawn.Start(p.cmd)
		}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if s, err := p.read(); err != nil || s != "ready" {
		p.close()
		return nil, fmt.Errorf("it does not run here: %q %v", s, err)
	}
	return p, nil
}

// eval runs code in the peer's VM and returns its result as a String.
func (p *nodePeer) eval(code string) (string, error) {
	b, err := json.Marshal(code)
	if err != nil {
		return "", err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return "", err
	}
	return p.read()
}

func (p *nodePeer) read() (string, error) {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return "", err
		}
		return "", io.ErrUnexpectedEOF
	}
	var s string
	if err := json.Unmarshal(p.out.Bytes(), &s); err != nil {
		return "", err
	}
	return s, nil
}

func (p *nodePeer) close() {
	p.in.Close()
	p.cancel()
	p.cmd.Wait()
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
