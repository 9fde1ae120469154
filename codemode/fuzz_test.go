package codemode_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

var (
	fuzzOnce sync.Once
	fuzzRT   *glovebox.Runtime
)

// FuzzHandle feeds Handle arbitrary model input with an Evaluator that
// echoes the code into every part of the result, so the input parser and
// the output budget both see hostile text: Handle must never fail, and
// what it returns must be one JSON object within MaxOutput.
func FuzzHandle(f *testing.F) {
	f.Add([]byte(`{"code":"1"}`), 0)
	f.Add([]byte(`{"code":"\u2028\"\\\u0000é"}`), 1)
	f.Add([]byte(`{"code":`+`"`+strings.Repeat(`\"<>&`, 3000)+`"}`), 3)
	f.Add([]byte(`{"code":null}`), 2)
	f.Add([]byte(`not json`), 4)
	f.Fuzz(func(t *testing.T, input []byte, mode int) {
		fuzzOnce.Do(func() {
			var err error
			fuzzRT, err = glovebox.New(context.Background(), glovebox.Config{PoolSize: -1})
			if err != nil {
				t.Fatal(err)
			}
		})
		limit := 1024 + (mode&0xffff)%(64<<10)
		echo := evaluatorFunc(func(_ context.Context, code string) (*glovebox.Result, error) {
			res := &glovebox.Result{Status: glovebox.StatusError, Stdout: code, Stderr: strings.Repeat(code, 3),
				Error:     &glovebox.GuestError{Class: code, Message: code, Backtrace: []string{code, code}},
				ToolCalls: []glovebox.ToolCall{{Name: "a", Error: code}, {Name: "a"}, {Name: "a"}}}
			if mode%2 == 0 {
				res.Status, res.Error, res.Value = glovebox.StatusOK, nil, []any{code, map[string]any{code: int64(len(code))}}
			}
			return res, nil
		})
		tool, err := codemode.New(codemode.Config{Runtime: fuzzRT, Evaluator: echo, MaxOutput: limit, Session: mode%3 == 0})
		if err != nil {
			t.Fatal(err)
		}
		out, err := tool.Handle(context.Background(), json.RawMessage(input))
		if err != nil {
			t.Fatalf("Handle(%q): %v", input, err)
		}
		var m map[string]any
		if err := json.Unmarshal(out.Output, &m); err != nil {
			t.Fatalf("output is not a JSON object: %v\n%s", err, out.Output)
		}
		if len(out.Output) > limit {
			t.Fatalf("output is %d bytes, over the %d limit", len(out.Output), limit)
		}
		if st, _ := m["status"].(string); st == "" || (st == "ok") == out.IsError {
			t.Fatalf("status %q with IsError %v", st, out.IsError)
		}
	})
}
