package glovebox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

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

func bigEqual(a, b any) bool {
	x, ok1 := a.(*big.Int)
	y, ok2 := b.(*big.Int)
	return ok1 && ok2 && x.Cmp(y) == 0
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

// TestEvalWithEnv: WithEnv is the guest's whole ENV; nothing of the
// host's is added; a session's ENV is replaced when an eval gives one
// and kept when it does not; names and values C cannot hold, and
// environments over the bounds, fail with ErrInvalidInput and run
// nothing.
func TestEvalWithEnv(t *testing.T) {
	ctx := context.Background()
	t.Setenv("GLOVEBOX_HOST_SECRET", "s3cret")
	res, err := rt.EvalWith(ctx, `ENV.to_h`, glovebox.WithEnv(map[string]string{"MODE": "batch", "LANG": "C", "EMPTY": "", "UNI": "é"}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	// The guest's locale is US-ASCII, so Ruby tags a non-ASCII value
	// ASCII-8BIT: its bytes come back as bytes.
	if got := res.Value.(map[string]any); len(got) != 4 || got["MODE"] != "batch" || got["EMPTY"] != "" || !bytes.Equal(got["UNI"].([]byte), []byte("é")) {
		t.Fatalf("ENV %#v", got)
	}
	for _, opt := range []glovebox.EvalOption{nil, glovebox.WithEnv(nil), glovebox.WithEnv(map[string]string{})} {
		res, err := rt.EvalWith(ctx, `ENV.size`, opt)
		if err != nil || res.Value != int64(0) {
			t.Fatalf("empty ENV: %v %#v", err, res)
		}
	}
	for _, env := range []map[string]string{
		{"": "x"}, {"A=B": "x"}, {"A\x00": "x"}, {"A": "x\x00y"},
		{"BIG": strings.Repeat("x", glovebox.MaxArgBytes)},
	} {
		if res, err := rt.EvalWith(ctx, `1`, glovebox.WithEnv(env)); !errors.Is(err, glovebox.ErrInvalidInput) || res != nil {
			t.Errorf("%q: got %v, %v; want ErrInvalidInput", env, res, err)
		}
		if err := glovebox.CheckEnv(env); !errors.Is(err, glovebox.ErrInvalidInput) {
			t.Errorf("CheckEnv(%q) = %v", env, err)
		}
	}
	many := map[string]string{}
	for i := range glovebox.MaxArgs + 1 {
		many[fmt.Sprint("V", i)] = ""
	}
	if err := glovebox.CheckEnv(many); !errors.Is(err, glovebox.ErrInvalidInput) {
		t.Errorf("%d variables: %v", len(many), err)
	}
	s, err := rt.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err = s.EvalWith(ctx, `ENV["OWN"] = "1"; ENV.keys.sort.join(",")`, glovebox.WithEnv(map[string]string{"A": "1"}))
	if err != nil || res.Value != "A,OWN" {
		t.Fatalf("session eval 1: %v %#v", err, res)
	}
	res, err = s.Eval(ctx, `ENV.keys.sort.join(",")`)
	if err != nil || res.Value != "A,OWN" {
		t.Fatalf("session eval without WithEnv keeps ENV: %v %#v", err, res)
	}
	res, err = s.EvalWith(ctx, `ENV.keys.sort.join(",")`, glovebox.WithEnv(map[string]string{"B": "2"}))
	if err != nil || res.Value != "B" {
		t.Fatalf("session eval with WithEnv replaces ENV: %v %#v", err, res)
	}
}

// TestEvalWithInput: WithStdin is the guest's $stdin, STDIN and gets;
// WithArgs its ARGV; input over the limits fails with ErrInvalidInput and
// runs nothing.
func TestEvalWithInput(t *testing.T) {
	ctx := context.Background()
	res, err := rt.EvalWith(ctx, `[$stdin.gets, $stdin.read, STDIN.equal?($stdin), ARGV, $stdin.read.encoding.name]`,
		glovebox.WithStdin(strings.NewReader("one\ntwo é\n")), glovebox.WithArgs("a", "", "b c"))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	if got := res.Value.([]any); got[0] != "one\n" || got[1] != "two é\n" || got[2] != true ||
		len(got[3].([]any)) != 3 || got[3].([]any)[2] != "b c" || got[4] != "UTF-8" {
		t.Fatalf("got %#v", got)
	}
	// Binary input arrives byte for byte.
	bin := []byte{0, 0xff, 0x80, '\n', 0x1b}
	res, err = rt.EvalWith(ctx, `$stdin.read.bytes`, glovebox.WithStdin(bytes.NewReader(bin)))
	if err != nil || len(res.Value.([]any)) != len(bin) || res.Value.([]any)[1] != int64(0xff) && res.Value.([]any)[1] != 255 {
		t.Fatalf("binary: %v %#v", err, res.Value)
	}
	// Kernel#gets, with no ARGV, reads standard input.
	res, err = rt.EvalWith(ctx, `gets`, glovebox.WithStdin(strings.NewReader("l1\nl2")))
	wantValue := func(res *glovebox.Result, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, glovebox.StatusOK)
		if res.Value != want {
			t.Fatalf("value %#v, want %q", res.Value, want)
		}
	}
	wantValue(res, err, "l1\n")
	// No options: empty input and ARGV.
	res, err = rt.Eval(ctx, `$stdin.read + ARGV.inspect`)
	wantValue(res, err, "[]")
	// Limits: Stdin, MaxArgs, MaxArgBytes, a failing reader.
	small := withLimits(t, glovebox.Limits{Stdin: 4})
	res, err = small.EvalWith(ctx, `$stdin.read`, glovebox.WithStdin(strings.NewReader("1234")))
	wantValue(res, err, "1234")
	for _, opt := range []glovebox.EvalOption{
		glovebox.WithStdin(strings.NewReader("12345")),
		glovebox.WithStdin(iotest.ErrReader(errors.New("disk gone"))),
		glovebox.WithArgs(make([]string, glovebox.MaxArgs+1)...),
		glovebox.WithArgs(strings.Repeat("x", glovebox.MaxArgBytes/2), strings.Repeat("y", glovebox.MaxArgBytes/2+1)),
	} {
		if res, err := small.EvalWith(ctx, `1`, opt); !errors.Is(err, glovebox.ErrInvalidInput) || res != nil {
			t.Errorf("got %v, %v; want ErrInvalidInput", res, err)
		}
	}
	if _, err := rt.WithLimits(glovebox.Limits{Stdin: -1}); !errors.Is(err, glovebox.ErrInvalidLimits) {
		t.Fatalf("negative Stdin: %v", err)
	}
	// A session: each eval's input is its own.
	s, err := rt.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err = s.EvalWith(ctx, `$first = $stdin; $stdin.read + ARGV.join`, glovebox.WithStdin(strings.NewReader("in1 ")), glovebox.WithArgs("x"))
	wantValue(res, err, "in1 x")
	res, err = s.Eval(ctx, `[$stdin.read, ARGV.join, $first.equal?($stdin)].inspect`)
	wantValue(res, err, `["", "", false]`)
}
