// The Ruby gem refuses the same tool names as ValidToolName.

package glovebox

import (
	"bytes"
	"encoding/json"
	"maps"
	"os/exec"
	"slices"
	"testing"
)

// TestRubyGemReservedNames: the gem's copy of ValidToolName's lists
// (ruby/lib/glovebox/exposure.rb) holds exactly Go's names, and its
// name_problem gives ValidToolName's verdict for every listed name and
// for names at the edges of the other rules, so a Sandbox refuses at
// construction what the executor would refuse at the first eval.
func TestRubyGemReservedNames(t *testing.T) {
	rb, err := exec.LookPath("ruby")
	if err != nil {
		t.Skip("ruby is not installed")
	}
	edges := []string{"", "a", "_", "x?", "y!", "a?!", "?", "A", "aB9", "9a", "a-b", "é", "__x", "_x", "it", "its",
		"_0", "_1", "_9", "_10", "to_", "to_x", "too", "tool", "orders", "refund!", "send_mail", "puts_all",
		"initialize", "then", "j", "jj", "instance_variables_to_inspect", "module_eval", "new"}
	names := slices.Concat(edges, coreMethods, mainMethods, protocolMethods, slices.Collect(maps.Keys(rubyKeywords)))
	const script = `require "json"
require "glovebox/errors"
require "glovebox/exposure"
e = Glovebox::Exposure
names = JSON.parse($stdin.read)
print JSON.generate("keywords" => e::KEYWORDS, "core" => e::CORE_METHODS, "main" => e::MAIN_METHODS,
                    "protocol" => e::PROTOCOL_METHODS, "ok" => names.to_h { [_1, e.name_problem(_1).nil?] })`
	cmd := exec.Command(rb, "-Iruby/lib", "-e", script)
	in, _ := json.Marshal(names)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ruby: %v\n%s", err, out)
	}
	var got struct {
		Keywords, Core, Main, Protocol []string
		OK                             map[string]bool
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	same := func(what string, ruby, gov []string) {
		r, g := slices.Sorted(slices.Values(ruby)), slices.Sorted(slices.Values(gov))
		if !slices.Equal(r, g) {
			t.Errorf("%s differ:\nruby %v\ngo   %v", what, r, g)
		}
	}
	same("keywords", got.Keywords, slices.Collect(maps.Keys(rubyKeywords)))
	same("core methods", got.Core, coreMethods)
	same("main methods", got.Main, mainMethods)
	same("protocol methods", got.Protocol, protocolMethods)
	for _, n := range names {
		if want := ValidToolName(n) == nil; got.OK[n] != want {
			t.Errorf("%q: the gem says valid=%v, ValidToolName says %v", n, got.OK[n], want)
		}
	}
}
