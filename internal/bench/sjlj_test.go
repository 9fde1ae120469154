package bench

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// The setjmp rows run against the real engine and report both figures
// with their baselines (no timing is judged here). GB_SJLJ_N sets the
// loop size, for measuring: GB_SJLJ_N=100000 go test -run BenchSjlj -v.
func TestBenchSjljRows(t *testing.T) {
	n, rounds := 2000, 3
	if v, err := strconv.Atoi(os.Getenv("GB_SJLJ_N")); err == nil && v > 0 {
		n, rounds = v, 11
	}
	cacheDir, err := glovebox.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := openEngine(context.Background(), cacheDir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var rows [][]string
	row := func(met string, cols ...string) { rows = append(rows, append(cols, met)) }
	if err := benchSjljN(context.Background(), eng, row, n, rounds); err != nil {
		t.Fatal(err)
	}
	// Array#<=>, the same deep, raise/rescue, throw/catch, then native
	// ruby's two rows (one saying why when ruby is not on PATH).
	want := 6
	if _, err := exec.LookPath("ruby"); err != nil {
		want = 5
	}
	if len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	for _, r := range rows {
		t.Log(strings.Join(r, " | "))
		if len(r) != 6 || !strings.HasSuffix(r[1], " ms") || !strings.HasSuffix(r[2], " ms") {
			t.Fatalf("row %q: want figure, result, baseline, ratio, target, met", r)
		}
	}
	// The owner's check reads this row's ratio (with 100k, not %dk).
	line := strings.Join(rows[0][:5], "  ")
	if m := regexp.MustCompile(`^\d+k Array#<=>.*?\s([\d.]+)x\s`).FindStringSubmatch(line); m == nil || !strings.HasPrefix(rows[0][3], m[1]) {
		t.Fatalf("the Array#<=> row %q does not parse", line)
	}
}
