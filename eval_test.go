package glovebox_test

import (
	"bytes"
	"context"
	"errors"
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
