package glovebox_test

import (
	"context"
	"errors"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox"
)

func TestStatusOK(t *testing.T) {
	res := eval(t, rt, `puts "hello"; $stderr.print "warn"; 40 + 2`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != int64(42) || res.Stdout != "hello\n" || res.Stderr != "warn" || res.Error != nil {
		t.Fatalf("got %+v", res)
	}
	// No fuel budget: the unmetered guest ran, and counted nothing.
	if res.FuelUsed != 0 || res.Duration <= 0 {
		t.Fatalf("fuel %d duration %v", res.FuelUsed, res.Duration)
	}
	if res.Err() != nil {
		t.Fatal(res.Err())
	}
}

func TestStatusError(t *testing.T) {
	res := eval(t, rt, "def boom\n  raise ArgumentError, 'boom'\nend\nboom")
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "ArgumentError" || res.Error.Message != "boom" {
		t.Fatalf("error %+v", res.Error)
	}
	want := []string{"sandbox:2:in 'Object#boom'", "sandbox:4:in '<main>'"}
	if !reflect.DeepEqual(res.Error.Backtrace, want) {
		t.Fatalf("backtrace %q, want %q", res.Error.Backtrace, want)
	}
	var ee *glovebox.EvalError
	if !errors.As(res.Err(), &ee) || ee.Class != "ArgumentError" {
		t.Fatalf("Err() = %v", res.Err())
	}
}

func TestSyntaxErrorIsError(t *testing.T) {
	res := eval(t, rt, "def (")
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "SyntaxError" || !strings.Contains(res.Error.Message, "sandbox:1") {
		t.Fatalf("error %+v", res.Error)
	}
}

func TestBacktraceHasNoHostPaths(t *testing.T) {
	res := eval(t, rt, `require "json"; JSON.parse("{")`)
	wantStatus(t, res, glovebox.StatusError)
	for _, f := range res.Error.Backtrace {
		if !strings.HasPrefix(f, "sandbox:") && !strings.HasPrefix(f, "/usr/local/lib/ruby/") {
			t.Errorf("unexpected frame %q", f)
		}
		for _, bad := range []string{"/root", "/home", "/tmp", "<glovebox>", "eval:", "-e:"} {
			if strings.Contains(f, bad) {
				t.Errorf("frame %q contains %q", f, bad)
			}
		}
	}
}

func TestTimeoutEndlessLoop(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: 300 * time.Millisecond})
	res := eval(t, r, "i = 0\nloop { i += 1 }")
	wantStatus(t, res, glovebox.StatusTimeout)
	if res.Error.Class != "Glovebox::Timeout" || !errors.Is(res.Err(), context.DeadlineExceeded) {
		t.Fatalf("error %+v, Err %v", res.Error, res.Err())
	}
}

func TestTimeoutPreemptsRegexBacktracking(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: 500 * time.Millisecond})
	// Ruby memoizes most backtracking since 3.2; a lookahead defeats that.
	res := eval(t, r, `Regexp.timeout = nil; /\A(?=(a+)+\z)/.match?("a" * 40 + "b")`)
	wantStatus(t, res, glovebox.StatusTimeout)
}

func TestSleepHonoursTimeout(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: time.Second})
	start := time.Now()
	res := eval(t, r, "sleep 30")
	wantStatus(t, res, glovebox.StatusTimeout)
	// A correctness bound, not a benchmark: without the poll_oneoff
	// override this takes 30 s.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("sleep 30 under a 1 s timeout took %v", d)
	}
}

func TestSleepShort(t *testing.T) {
	res := eval(t, rt, "t = Process.clock_gettime(Process::CLOCK_MONOTONIC); sleep 0.05; Process.clock_gettime(Process::CLOCK_MONOTONIC) - t")
	wantStatus(t, res, glovebox.StatusOK)
	if d, _ := res.Value.(float64); d < 0.04 {
		t.Fatalf("slept %v s, want about 0.05", res.Value)
	}
}

func TestFuelExhausted(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Fuel: 5_000_000})
	res := eval(t, r, "loop {}")
	wantStatus(t, res, glovebox.StatusFuelExhausted)
	if res.FuelUsed < 4_000_000 {
		t.Fatalf("fuel used %d", res.FuelUsed)
	}
}

func TestFuelIsDeterministic(t *testing.T) {
	code := "i = 0; while i < 10_000; i += 1; end; i"
	r := withLimits(t, glovebox.Limits{Fuel: 1 << 40})
	a, b := eval(t, r, code), eval(t, r, code)
	if a.FuelUsed == 0 || a.FuelUsed != b.FuelUsed {
		t.Fatalf("fuel %d then %d for the same program", a.FuelUsed, b.FuelUsed)
	}
}

// TestFuelBudgetPicksMeteredCode checks that only evals with a fuel
// budget run the guest compiled with fuel metering: a Runtime without a
// budget reports no fuel, its view with one counts and enforces it (in
// evals and sessions), and a Runtime made with a budget counts from the
// start.
func TestFuelBudgetPicksMeteredCode(t *testing.T) {
	const code = "i = 0; while i < 100_000; i += 1; end; i"
	if res := eval(t, rt, code); res.FuelUsed != 0 {
		t.Fatalf("no budget: fuel used %d", res.FuelUsed)
	}
	// 100k iterations take about 5.1e7 fuel (see Limits.Fuel).
	view := withLimits(t, glovebox.Limits{Fuel: 100_000_000})
	if res := eval(t, view, code); res.Status != glovebox.StatusOK || res.FuelUsed == 0 {
		t.Fatalf("with a budget: %s, fuel used %d", res.Status, res.FuelUsed)
	}
	wantStatus(t, eval(t, view, "loop {}"), glovebox.StatusFuelExhausted)
	s, err := view.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Eval(context.Background(), code)
	if err != nil || res.FuelUsed == 0 {
		t.Fatalf("session with a budget: %v, fuel used %d", err, res.FuelUsed)
	}
	r := newRuntime(t, glovebox.Config{Limits: glovebox.Limits{Fuel: 100_000_000}})
	if res := eval(t, r, code); res.FuelUsed == 0 {
		t.Fatal("a Runtime made with a budget counted no fuel")
	}
}

func TestMemoryLimit(t *testing.T) {
	for name, code := range map[string]string{
		"one huge string": `"x" * 400_000_000`,
		"growing array":   `a = []; loop { a << ("x" * 1_000_000) }`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, rt, code)
			wantStatus(t, res, glovebox.StatusMemoryLimit)
		})
	}
}

func TestMemoryLimitBelowFloorRejected(t *testing.T) {
	_, err := rt.WithLimits(glovebox.Limits{Memory: 64 << 20})
	if !errors.Is(err, glovebox.ErrInvalidLimits) {
		t.Fatalf("err %v", err)
	}
	if _, err := rt.WithLimits(glovebox.Limits{Timeout: -1}); !errors.Is(err, glovebox.ErrInvalidLimits) {
		t.Fatalf("negative timeout: err %v", err)
	}
}

func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res, err := rt.Eval(ctx, "loop {}")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusCanceled)
	if !errors.Is(res.Err(), context.Canceled) {
		t.Fatalf("Err %v", res.Err())
	}
	// Cancelled while sleeping in a host call.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res, _ = rt.Eval(ctx, "sleep 30")
	wantStatus(t, res, glovebox.StatusCanceled)
	// Already cancelled.
	res, _ = rt.Eval(ctx, "1")
	wantStatus(t, res, glovebox.StatusCanceled)
}

func TestSandboxErrorOnMalformedChannelMessage(t *testing.T) {
	res := eval(t, rt, `Glovebox.send(:__send, "no-such-op", "")`)
	wantStatus(t, res, glovebox.StatusSandboxError)
	if !strings.Contains(res.Error.Message, "unknown message") {
		t.Fatalf("error %+v", res.Error)
	}
}

func TestOutputTruncation(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Stdout: 1000, Stderr: 100})
	res := eval(t, r, `2000.times { print "é" }; $stderr.print "x" * 500; 1`)
	wantStatus(t, res, glovebox.StatusOK)
	if !res.StdoutTruncated || !res.StderrTruncated {
		t.Fatalf("truncation flags %v %v", res.StdoutTruncated, res.StderrTruncated)
	}
	if !utf8.ValidString(res.Stdout) {
		t.Fatal("stdout cut inside a character")
	}
	body, marker, ok := strings.Cut(res.Stdout, "\n[glovebox: stdout truncated at 1000 bytes]")
	if !ok || len(body) > 1000 || len(body) < 998 || strings.Trim(body, "é") != "" || marker != "\n" {
		t.Fatalf("stdout %d bytes: %q...", len(res.Stdout), res.Stdout[len(res.Stdout)-60:])
	}
	if !strings.HasPrefix(res.Stderr, strings.Repeat("x", 100)+"\n[glovebox: stderr truncated") {
		t.Fatalf("stderr %q", res.Stderr)
	}
}

func TestOutputFloodEndsByTimeout(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: 500 * time.Millisecond, Stdout: 4096})
	res := eval(t, r, `loop { print "x" * 4096 }`)
	wantStatus(t, res, glovebox.StatusTimeout)
	if !res.StdoutTruncated || len(res.Stdout) > 4096+100 {
		t.Fatalf("stdout %d bytes, truncated %v", len(res.Stdout), res.StdoutTruncated)
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

func TestValues(t *testing.T) {
	big70, _ := new(big.Int).SetString("1180591620717411303424", 10)
	cases := []struct {
		code string
		want any
	}{
		{"nil", nil},
		{"true", true},
		{"[false]", []any{false}},
		{"-12", int64(-12)},
		{"2**70", big70},
		{"-(2**70)", new(big.Int).Neg(big70)},
		{"1.5", 1.5},
		{"1e308 * 10", math.Inf(1)},
		{"-1e308 * 10", math.Inf(-1)},
		{`"héllo"`, "héllo"},
		{":sym", "sym"},
		{`{a: {b: [:c, "d"]}, "e" => 1}`, map[string]any{"a": map[string]any{"b": []any{"c", "d"}}, "e": int64(1)}},
		{`{1 => 2, nil => 3, [1] => 4}`, map[string]any{"1": int64(2), "nil": int64(3), "[1]": int64(4)}},
		{`"\xff\xfeok".b`, []byte("\xff\xfeok")}, // binary Strings are bytes, exactly
		{`"caf\xC3\xA9".force_encoding("ASCII-8BIT")`, []byte("café")},
		{`"plain".b`, "plain"},                  // all ASCII: the same as text
		{`{"$base64" => "aGk="}`, []byte("hi")}, // the one reserved shape
		{`"\xff".force_encoding("UTF-8")`, "\ufffd"},
		{`"héllo".encode("UTF-16LE")`, "héllo"},
		{"Struct.new(:a).new(1)", "#<struct a=1>"},
		{"1..3", "1..3"},
		{"Object.new.then { def _1.inspect = raise('no'); _1 }", "#<Object>"},
		{"a = [1]; a << a; a", []any{int64(1), "[...]"}},
		{"h = {}; h[:self] = h; h", map[string]any{"self": "{...}"}},
		{"x = [1]; [x, x]", []any{[]any{int64(1)}, []any{int64(1)}}},
	}
	for _, c := range cases {
		res := eval(t, rt, c.code)
		if res.Status != glovebox.StatusOK {
			t.Errorf("%s: status %s %+v", c.code, res.Status, res.Error)
			continue
		}
		if !reflect.DeepEqual(res.Value, c.want) && !bigEqual(res.Value, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.code, res.Value, c.want)
		}
	}
	res := eval(t, rt, "Float::NAN")
	if f, ok := res.Value.(float64); !ok || !math.IsNaN(f) {
		t.Errorf("NaN: got %#v", res.Value)
	}
}

func bigEqual(a, b any) bool {
	x, ok1 := a.(*big.Int)
	y, ok2 := b.(*big.Int)
	return ok1 && ok2 && x.Cmp(y) == 0
}

func TestValueTooDeep(t *testing.T) {
	res := eval(t, rt, "a = []; 100.times { a = [a] }; a")
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "Glovebox::ValueError" || !strings.Contains(res.Error.Message, "64 levels") {
		t.Fatalf("error %+v", res.Error)
	}
	res = eval(t, rt, "a = []; 60.times { a = [a] }; a")
	wantStatus(t, res, glovebox.StatusOK)
}

func TestValueTooLarge(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Value: 1000})
	res := eval(t, r, `"x" * 2000`)
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "Glovebox::ValueError" || !strings.Contains(res.Error.Message, "1000-byte limit") {
		t.Fatalf("error %+v", res.Error)
	}
	res = eval(t, r, `puts "x" * 2000; :ok`)
	wantStatus(t, res, glovebox.StatusOK)
}

func TestResultJSON(t *testing.T) {
	res := eval(t, rt, `puts "hi"; [2**70, Float::NAN, -Float::INFINITY, "<&>"]`)
	b, err := res.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"status":"ok"`, `"value":[1180591620717411303424,"NaN","-Infinity","<&>"]`, `"stdout":"hi\n"`,
		`"stdout_truncated":false`, `"stderr_truncated":false`, `"error":null`, `"fuel_used":`, `"duration_ms":`, `"tool_calls":[]`} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s: %s", want, s)
		}
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
