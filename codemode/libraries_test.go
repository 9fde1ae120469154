package codemode_test

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/internal/codemodetest"
)

// TestDescribedLibraries: every library the model-facing description
// says a program can require loads in the guest, and every one it says
// is not there fails with a LoadError, read from the description's own
// text, so it cannot promise what the image lacks (it promised
// "bundled gems" while require "bigdecimal" failed).
func TestDescribedLibraries(t *testing.T) {
	desc := codemode.DescribeSandbox("run_ruby", false, nil, nil, glovebox.Limits{}, 0, 0, "")
	var line string
	for _, l := range strings.Split(desc, "\n") {
		if strings.HasPrefix(l, "- Ruby 4.0") {
			line = l
		}
	}
	works, lacks, ok := strings.Cut(line, "Not in the sandbox:")
	if !ok {
		t.Fatalf("the description's Ruby line says nothing of what is missing: %q", line)
	}
	names := func(s string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`"([a-z0-9_/]+)"`).FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	load, fail := names(works), names(lacks)
	wantLoad, wantFail := codemode.Libraries()
	if !slices.Equal(load, wantLoad) || !slices.Equal(fail, wantFail) || !slices.Contains(fail, "bigdecimal") {
		t.Fatalf("the text names %v / %v; the lists are %v / %v", load, fail, wantLoad, wantFail)
	}
	both, _ := json.Marshal(append(append([]string{}, load...), fail...))
	rt := codemodetest.Runtime(t, nil, glovebox.Limits{})
	res, err := rt.Eval(context.Background(), `JSON.parse(`+strconv.Quote(string(both))+`).to_h do |n|
  require n
  [n, "ok"]
rescue LoadError => e
  [n, "LoadError: #{e.message}"]
end`)
	if err != nil || res.Status != glovebox.StatusOK {
		t.Fatalf("%v %v %+v", err, res.Status, res.Error)
	}
	got := res.Value.(map[string]any)
	for _, n := range load {
		if got[n] != "ok" {
			t.Errorf("the description says %q loads; in the guest: %v", n, got[n])
		}
	}
	for _, n := range fail {
		if s, _ := got[n].(string); !strings.HasPrefix(s, "LoadError") {
			t.Errorf("the description says %q is not in the sandbox; in the guest: %v", n, got[n])
		}
	}
}
