package glovebox_test

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

func fmtSscan(s string, a ...any) (int, error) { return fmt.Sscan(s, a...) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// privateScratch is the directory under a Config.ScratchDir where this
// user's scratch directories go.
func privateScratch(base string) string {
	return filepath.Join(base, fmt.Sprintf("glovebox-%d", os.Geteuid()))
}

// syncBuffer is a bytes.Buffer safe for the eval goroutine to write while
// a tool reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func withLimitsOf(t *testing.T, r *glovebox.Runtime, l glovebox.Limits) *glovebox.Runtime {
	t.Helper()
	v, err := r.WithLimits(l)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

func equalValue(a, b any) bool {
	switch b := b.(type) {
	case map[string]any:
		m, ok := a.(map[string]any)
		return ok && len(m) == len(b)
	case []any:
		s, ok := a.([]any)
		if !ok || len(s) != len(b) {
			return false
		}
		for i := range s {
			if !equalValue(s[i], b[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	var size, rss int64
	if _, err := fmtSscan(string(b), &size, &rss); err != nil {
		t.Fatal(err)
	}
	return rss * int64(os.Getpagesize())
}

// deepStackCode exhausts the wasm stack (not Ruby's own stack check):
// Marshal.dump recurses in C once per level and reaches about 12,600 levels
// with the 6 MiB wasm stack.
const deepStackCode = `a = []; 20_000.times { a = [a] }; Marshal.dump(a)`

func sameArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		switch x := a[i].(type) {
		case *big.Int:
			y, ok := b[i].(*big.Int)
			if !ok || x.Cmp(y) != 0 {
				return false
			}
		case float64:
			y, ok := b[i].(float64)
			if !ok || !(x == y && math.Signbit(x) == math.Signbit(y) || math.IsNaN(x) && math.IsNaN(y)) {
				return false
			}
		default:
			if !reflect.DeepEqual(a[i], b[i]) {
				return false
			}
		}
	}
	return true
}
