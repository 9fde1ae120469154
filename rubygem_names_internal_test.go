// The Ruby gem refuses the same tool names as ValidToolName.

package glovebox

import (
	"bytes"
	"encoding/json"
	"maps"
	"os/exec"
	"slices"
	"strings"
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
	var got struct {
		Keywords, Core, Main, Protocol []string
		OK                             map[string]bool
	}
	rubyVerdicts(t, rb, script, names, &got)
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

// TestRubyGemMountRules: the gem's guest-path check (Sandbox.
// guest_path_problem, with RESERVED_GUEST_PATHS) gives validateMounts'
// verdict for paths at the edges of its rules, so a Sandbox, a profile
// or a code-mode class refuses at construction the mount glovebox.New
// would refuse.
func TestRubyGemMountRules(t *testing.T) {
	rb, err := exec.LookPath("ruby")
	if err != nil {
		t.Skip("ruby is not installed")
	}
	paths := []string{"", "/", "data", "./data", "/data", "/data/", "/data//x", "/data/./x", "/data/../x", "/a\\b",
		"/tmp", "/tmp/x", "/tmpx", "/usr", "/usr/lib", "/us", "/work", "/src", "/workspace", "/é",
		"/" + strings.Repeat("x", 1024), "/" + strings.Repeat("x", 1023)}
	const script = `require "json"
require "glovebox"
paths = JSON.parse($stdin.read)
print JSON.generate("reserved" => Glovebox::Sandbox::RESERVED_GUEST_PATHS,
                    "ok" => paths.to_h { [_1, Glovebox::Sandbox.guest_path_problem(_1).nil?] })`
	var got struct {
		Reserved []string
		OK       map[string]bool
	}
	rubyVerdicts(t, rb, script, paths, &got)
	if !slices.Equal(slices.Sorted(slices.Values(got.Reserved)), slices.Sorted(slices.Values(ReservedGuestPaths()))) {
		t.Errorf("the gem reserves %v, glovebox %v", got.Reserved, ReservedGuestPaths())
	}
	for _, p := range paths {
		want := validateMounts([]Mount{{HostPath: "/h", GuestPath: p}}) == nil
		if got.OK[p] != want {
			t.Errorf("%q: the gem says valid=%v, validateMounts says %v", p, got.OK[p], want)
		}
	}
}

// rubyVerdicts runs script with the gem's lib on the load path and in
// (JSON) on its stdin, and decodes what it prints into out.
func rubyVerdicts(t *testing.T, rb, script string, in, out any) {
	t.Helper()
	cmd := exec.Command(rb, "-Iruby/lib", "-e", script)
	b, _ := json.Marshal(in)
	cmd.Stdin = bytes.NewReader(b)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ruby: %v\n%s", err, got)
	}
	if err := json.Unmarshal(got, out); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
}
