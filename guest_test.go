// The guest's environment: encoding, clocks, bundled libraries.

package glovebox_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// The guest's clocks are consistent with the snapshot and reveal nothing
// of the host process's age.
func TestClocks(t *testing.T) {
	res := eval(t, rt, `[Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), Process.times.utime, Process.clock_gettime(Process::CLOCK_MONOTONIC), Time.now.to_f]`)
	wantStatus(t, res, glovebox.StatusOK)
	v := res.Value.([]any)
	cpu, utime, mono, now := v[0].(float64), v[1].(float64), v[2].(float64), v[3].(float64)
	if cpu < 0 || cpu > 3600 || utime < 0 || utime > 3600 || mono <= 0 || mono > 3600 {
		t.Fatalf("clocks %v", v)
	}
	if d := now - float64(time.Now().UnixNano())/1e9; d > 5 || d < -5 {
		t.Fatalf("real-time clock off by %v s", d)
	}
}

func TestEncodingIsUTF8(t *testing.T) {
	res := eval(t, rt, `[Encoding.default_external.name, __ENCODING__.name, "é".encoding.name, $stdout.external_encoding&.name || "default", "héllo".length]`)
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{"UTF-8", "UTF-8", "UTF-8", "default", int64(5)}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %v, want %v", res.Value, want)
	}
}

func TestBundledLibraries(t *testing.T) {
	res := eval(t, rt, `require "csv"; require "prime"; require "matrix"
		[CSV.parse("a,b\n1,2", headers: true).map(&:to_h), Prime.first(4), Matrix[[1, 2], [3, 4]].determinant]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{[]any{map[string]any{"a": "1", "b": "2"}}, []any{int64(2), int64(3), int64(5), int64(7)}, int64(-2)}) {
		t.Fatalf("got %v", res.Value)
	}
}
