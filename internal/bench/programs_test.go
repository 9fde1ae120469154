package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// benchRuntime is a Runtime like the one the program rows use.
func benchRuntime(t *testing.T) *glovebox.Runtime {
	t.Helper()
	rt, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, Limits: glovebox.Limits{Timeout: 5 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// The programs compute what the tasks they follow define: checked in the
// guest against the published reference outputs of the Computer Language
// Benchmarks Game for small sizes, and against values computed here for
// the programs whose output is glovebox's own checksum.
func TestProgramsAnswerTheReference(t *testing.T) {
	rt := benchRuntime(t)
	for _, c := range []struct {
		file string
		n    int
		want string
	}{
		{"nbody.rb", 1000, "-0.169087605"},       // the task's output for 1000 steps
		{"fannkuch.rb", 7, "228016"},             // checksum 228, Pfannkuchen(7) = 16
		{"spectral_norm.rb", 100, "1.274219991"}, // the task's output for 100
		{"binary_trees.rb", 6, fmt.Sprint(binaryTreesCheck(6))},
		{"matmul.rb", 4, matmulCheck(4)},
		{"json_round_trip.rb", 2, "28636:SKU-49-4"}, // 14,318 bytes a document (native ruby 3.1 and 4.0 agree)
		{"cpu8.rb", 1, cpu8Check(1)},
	} {
		src, err := programFiles.ReadFile("programs/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		res, err := rt.Eval(context.Background(), string(src)+fmt.Sprintf("bench(%d).to_s", c.n))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != glovebox.StatusOK || res.Value != c.want {
			t.Errorf("%s bench(%d): %s %v %+v, want %s", c.file, c.n, res.Status, res.Value, res.Error, c.want)
		}
	}
}

// binaryTreesCheck is binary_trees.rb's result for maxDepth, counted
// here: every tree of depth d has 2^(d+1) - 1 nodes.
func binaryTreesCheck(maxDepth int) int {
	nodes := func(d int) int { return 1<<(d+1) - 1 }
	minDepth := 4
	maxDepth = max(minDepth+2, maxDepth)
	sum := nodes(maxDepth + 1)
	for d := minDepth; d <= maxDepth; d += 2 {
		sum += (1 << (maxDepth - d + minDepth)) * nodes(d)
	}
	return sum + nodes(maxDepth)
}

// cpu8Check is cpu8.rb's result for n passes, computed here by the same
// arithmetic: each pass adds the second table into the first with carry,
// then XORs 0x5A; 4 + 256*5 + 2 instructions a pass, then HLT.
func cpu8Check(n int) string {
	var a, b [256]int
	for i := range 256 {
		a[i], b[i] = i, (i*7)&0xFF
	}
	for range n {
		carry := 0
		for x := range 256 {
			s := a[x] + b[x] + carry
			carry = s >> 8
			a[x] = (s & 0xFF) ^ 0x5A
		}
	}
	sum := 0
	for i, v := range a {
		sum += v * (i + 1)
	}
	// LDY; a pass: LDX, CLC, six a byte (LDA ADC EOR STA INX BNE), DEY, BNE; HLT.
	steps := 1 + n*(2+256*6+2) + 1
	return fmt.Sprint(sum*10_000_000 + steps)
}

// matmulCheck is matmul.rb's result for n: the middle element of the
// product, a[i][k] = (i² - k²) / n², b[k][j] = 2 (k² - j²) / n².
func matmulCheck(n int) string {
	m := n / 2
	var s float64
	for k := range n {
		s += float64(m*m-k*k) * float64(k*k-m*m)
	}
	return fmt.Sprint(s * 2 / float64(n*n*n*n))
}

// The Float rows and the program rows are measured and printed with their
// baselines (at small sizes here; no figure is judged).
func TestBenchFloatsAndProgramsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs native ruby and Node beside the guest")
	}
	rt := benchRuntime(t)
	saveF, saveP := floatRows, programSuite
	defer func() { floatRows, programSuite = saveF, saveP }()
	floatRows = []floatRow{{"nbody.rb", "n-body, 50 steps", "step", 50, 50}, {"matmul.rb", "matmul, 10 x 10", "multiply-add", 10, 1000}}
	programSuite = []program{{"fannkuch.rb", "fannkuch-redux, n = 6", 6, 5}, {"spectral_norm.rb", "spectral-norm, n = 20", 20, 5}}
	var rows [][]string
	row := func(met string, cols ...string) { rows = append(rows, append(cols, met)) }
	if err := benchFloats(context.Background(), rt, row); err != nil {
		t.Fatal(err)
	}
	if err := benchPrograms(context.Background(), rt, row); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Log(strings.Join(r, " | "))
		if len(r) != 6 {
			t.Fatalf("row %q: want figure, result, baseline, ratio, target, met", r)
		}
	}
	if len(rows) != 5 {
		t.Fatalf("%d rows, want 2 Float rows, 2 program rows and the geometric mean", len(rows))
	}
	if !strings.Contains(rows[0][1], "GC ") || !strings.Contains(rows[0][1], "a step") {
		t.Errorf("the n-body row does not give the GC time per step: %q", rows[0][1])
	}
	if !strings.HasPrefix(rows[4][0], "programs: geometric mean") {
		t.Errorf("last row %q", rows[4][0])
	}
}
