package engine

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// unavailableGems are the gems in the image that cannot load in WASI,
// each with the reason; requiring one raises a LoadError that says so
// (it carries "[glovebox]"). Every other default or bundled gem in the
// image must require.
var unavailableGems = map[string]string{
	"drb":                 "needs socket: WASI has no sockets",
	"ipaddr":              "needs socket (for its address-family constants)",
	"net-ftp":             "needs socket",
	"net-http":            "needs socket; the host's http tool is the way out",
	"net-imap":            "needs socket",
	"net-pop":             "needs socket",
	"net-protocol":        "needs socket",
	"net-smtp":            "needs socket",
	"resolv":              "needs socket: no DNS in the sandbox",
	"resolv-replace":      "needs socket",
	"test-unit":           "needs socket (through its optional runners)",
	"rinda":               "needs drb, which needs socket",
	"irb":                 "needs io/console: no terminal",
	"readline":            "needs io/console: no terminal",
	"reline":              "needs io/console: no terminal",
	"repl_type_completor": "needs the rbs gem, a native extension not in the image",
	"typeprof":            "needs the rbs gem, a native extension not in the image",
}

// gemProbe enumerates the default and bundled gems of the image itself
// (gem directories and default-gem specs), finds each one's main feature
// and requires it. It returns {gem => "ok" | "nofeature" | error message}.
const gemProbe = `
root = "/usr/local/lib/ruby/gems"
gems = Dir.glob("#{root}/*/gems/*").map { File.basename(_1) } |
       Dir.glob("#{root}/*/specifications/default/*.gemspec").map { File.basename(_1, ".gemspec") }
out = {}
gems.uniq.sort.each do |full|
  name = full.sub(/-[^-]+\z/, "")
  lib = Dir.glob("#{root}/*/gems/#{full}/lib").first
  cands = [name.tr("-", "/"), name, name.capitalize, "#{name}/#{name}"]
  cands += Dir.glob("#{lib}/*.rb").map { File.basename(_1, ".rb") } if lib
  out[name] = "nofeature"
  cands.uniq.each do |c|
    begin
      require c
      out[name] = "ok"
      break
    rescue LoadError => e
      next if e.path.nil? || e.path == c # no such feature: try the next name
      out[name] = e.message
      break
    end
  end
end
out
`

func TestImageGemsRequire(t *testing.T) {
	lim := testLimits
	lim.Timeout = 60 * time.Second
	out, err := testEngine.Eval(context.Background(), &Request{Code: gemProbe, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusOK {
		t.Fatalf("%s %+v", out.Status, out.Error)
	}
	res := out.Value.(map[string]any)
	if len(res) < 40 {
		t.Fatalf("only %d gems found in the image: %v", len(res), res)
	}
	var names []string
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		got, _ := res[n].(string)
		why, listed := unavailableGems[n]
		switch {
		case got == "nofeature":
			t.Errorf("%s: no feature to require found in the image", n)
		case got == "ok" && listed:
			t.Errorf("%s loads now; drop it from unavailableGems (%s)", n, why)
		case got != "ok" && !listed:
			t.Errorf("%s does not load: %s", n, got)
		case got != "ok" && !strings.Contains(got, "[glovebox]"):
			t.Errorf("%s: LoadError without the sandbox's reason: %s", n, got)
		}
	}
	for n := range unavailableGems {
		if _, ok := res[n]; !ok {
			t.Errorf("%s is listed as unavailable but is not in the image", n)
		}
	}
}

func TestRequireNamedBundledGems(t *testing.T) {
	// The replayed report: bundled gems present in the image.
	v := evalValue(t, testEngine, `require "benchmark"; require "logger"; require "pstore"; require "csv"
			[Benchmark.realtime { 1 }.is_a?(Float), Logger.new($stdout).level, PStore.name, CSV.parse_line("a,b")]`)
	if got := fmt.Sprint(v); got != "[true 0 PStore [a b]]" {
		t.Fatalf("got %s", got)
	}
}
