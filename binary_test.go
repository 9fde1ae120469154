package glovebox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Binary Strings cross both ways exactly: a guest String in ASCII-8BIT
// with bytes above 0x7f is []byte in Go (tool arguments and the value),
// {"$base64": ...} in JSON, and []byte a tool returns is a binary String
// in the guest. (Such bytes were read as UTF-8: each invalid one became
// U+FFFD.)
func TestBinaryStringsExact(t *testing.T) {
	var ts glovebox.Toolset
	var gotAny any
	if err := ts.Add("keep", func(ctx context.Context, a glovebox.Args) (any, error) {
		gotAny = a.Positional[0]
		return a.Positional[0], nil
	}); err != nil {
		t.Fatal(err)
	}
	var gotStr string
	var gotBytes []byte
	if err := ts.Func("typed", func(s string, b []byte) int { gotStr, gotBytes = s, b; return len(b) }); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, glovebox.Config{Tools: &ts, PoolSize: -1})
	res, err := rt.Eval(context.Background(), `
		bin = "\x89PNG\r\n\x1a\n\xff\x00".b
		back = keep([bin, {"k" => bin}])
		typed(bin, bin)
		[back[0] == bin, back[0].encoding.to_s, back[1]["k"] == bin, "plain".b, bin]`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusOK {
		t.Fatalf("%v: %+v", res.Status, res.Error)
	}
	want := "\x89PNG\r\n\x1a\n\xff\x00"
	v := res.Value.([]any)
	if v[0] != true || v[1] != "ASCII-8BIT" || v[2] != true || v[3] != "plain" {
		t.Fatalf("%#v", v)
	}
	if b, ok := v[4].([]byte); !ok || string(b) != want {
		t.Fatalf("value %#v", v[4])
	}
	if a, ok := gotAny.([]any); !ok || string(a[0].([]byte)) != want || string(a[1].(map[string]any)["k"].([]byte)) != want {
		t.Fatalf("argument %#v", gotAny)
	}
	if gotStr != want || string(gotBytes) != want {
		t.Fatalf("typed: %q %q", gotStr, gotBytes)
	}
	j, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `{"$base64":"iVBORw0KGgr/AA=="}`) {
		t.Fatalf("JSON: %s", j)
	}
}
