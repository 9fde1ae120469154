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

func evalOut(t *testing.T, code string, timeout time.Duration) *Outcome {
	t.Helper()
	lim := testLimits
	lim.Timeout = timeout
	out, err := testEngine.Eval(context.Background(), &Request{Code: code, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTimeoutInsideSandbox: Timeout.timeout works without threads, for
// each way a block can run long. Values only: no timing is asserted.
func TestTimeoutInsideSandbox(t *testing.T) {
	const pre = "require 'timeout'\n"
	cases := []struct{ name, code, want string }{
		{"returns", `Timeout.timeout(2) { 41 + 1 }`, "42"},
		{"loop", `begin; Timeout.timeout(0.2) { loop {} }; rescue Timeout::Error; :cut; end`, "cut"},
		{"while with body", `begin; Timeout.timeout(0.2) { x = 0; while true; x += 1; end }; rescue Timeout::Error => e; e.message; end`, "execution expired"},
		{"C methods", `begin; Timeout.timeout(0.2) { loop { [3, 1, 2].sort } }; rescue Timeout::Error; :cut; end`, "cut"},
		{"sleep", `begin; Timeout.timeout(0.2) { sleep 30 }; rescue Timeout::Error; :cut; end`, "cut"},
		{"sleep forever", `begin; Timeout.timeout(0.2) { sleep }; rescue Timeout::Error; :cut; end`, "cut"},
		{"custom class", `begin; Timeout.timeout(0.2, ArgumentError, "too slow") { loop {} }; rescue ArgumentError => e; e.message; end`, "too slow"},
		{"inner fires", `Timeout.timeout(20) { begin; Timeout.timeout(0.1) { loop {} }; rescue Timeout::Error; :inner; end }`, "inner"},
		{"outer fires through inner", `begin; Timeout.timeout(0.1) { Timeout.timeout(20) { loop {} }; :no }; rescue Timeout::Error; :outer; end`, "outer"},
		{"rescue StandardError inside", `begin; Timeout.timeout(0.1) { begin; loop {}; rescue StandardError; :swallowed; end }; rescue Timeout::Error; :cut; end`, "cut"},
		{"ensure runs", `e = nil; begin; Timeout.timeout(0.1) { begin; loop {}; ensure; e = :ran; end }; rescue Timeout::Error; end; e`, "ran"},
		{"is a RuntimeError", `Timeout::Error.ancestors.include?(RuntimeError)`, "true"},
		{"zero means none", `Timeout.timeout(0) { :done }`, "done"},
		{"mixin", `include Timeout; timeout(1) { :mixed }`, "mixed"},
		{"later code is not cut", `Timeout.timeout(0.1) { 1 }; sleep 0.3; :ok`, "ok"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := evalOut(t, pre+c.code, 10*time.Second)
			if out.Status != StatusOK || fmt.Sprint(out.Value) != c.want {
				t.Fatalf("%s: %s %v %+v", c.code, out.Status, out.Value, out.Error)
			}
		})
	}
}

// TestTimeoutEventlessLoopBackedByEvalDeadline: a loop that makes no
// trace event (an empty while body) is not cut by Timeout.timeout; the
// eval's own deadline ends it, as documented.
func TestTimeoutEventlessLoopBackedByEvalDeadline(t *testing.T) {
	out := evalOut(t, "require 'timeout'; Timeout.timeout(0.05) { while true; end }", 500*time.Millisecond)
	if out.Status != StatusTimeout {
		t.Fatalf("%s %v %+v", out.Status, out.Value, out.Error)
	}
}

func TestThreadsSayUnavailable(t *testing.T) {
	for _, code := range []string{`Thread.new { 1 }`, `Thread.start { 1 }`, `Thread.fork { 1 }`, `Ractor.new { 1 }`} {
		out := evalOut(t, code, 10*time.Second)
		if out.Status != StatusError || out.Error.Class != "NotImplementedError" ||
			!strings.Contains(out.Error.Message, "threads are unavailable") || strings.Contains(out.Error.Message, "unimplemented on this machine") {
			t.Errorf("%s: %s %+v", code, out.Status, out.Error)
		}
	}
}

func TestExitKeepsStatus(t *testing.T) {
	for code, want := range map[string]string{
		`exit 3`:                            "exit 3",
		`exit`:                              "exit 0",
		`exit false`:                        "exit 1",
		`abort "bye"`:                       "bye (exit 1)",
		`exit! 4`:                           "status 4",
		`raise SystemExit.new(7, "custom")`: "custom (exit 7)",
	} {
		out := evalOut(t, code, 10*time.Second)
		if out.Status != StatusError || out.Error.Class != "SystemExit" || !strings.Contains(out.Error.Message, want) {
			t.Errorf("%s: %s %+v, want message with %q", code, out.Status, out.Error, want)
		}
	}
}

func TestTZWarnsAndLocalTimeIsUTC(t *testing.T) {
	out := evalOut(t, `ENV["TZ"] = "Asia/Tokyo"; [ENV["TZ"], Time.now.utc_offset, Time.now.getlocal("+09:00").utc_offset]`, 10*time.Second)
	if out.Status != StatusOK || fmt.Sprint(out.Value) != "[Asia/Tokyo 0 32400]" || !strings.Contains(string(out.Stderr), `ENV["TZ"] has no effect`) {
		t.Fatalf("%s %v %q %+v", out.Status, out.Value, out.Stderr, out.Error)
	}
	out = evalOut(t, `ENV.store("TZ", "UTC"); ENV["TZ"] = nil; 1`, 10*time.Second)
	if out.Status != StatusOK || len(out.Stderr) != 0 {
		t.Fatalf("UTC warned: %s %q %+v", out.Status, out.Stderr, out.Error)
	}
}

// TestHashSeedIsSharedAcrossVMs pins a documented property of the boot
// snapshot: every VM starts with the same hash seed (and heap layout). If
// this changes, update README/RATIONALE and the codemode description.
func TestHashSeedIsSharedAcrossVMs(t *testing.T) {
	a := evalValue(t, testEngine, `["glovebox".hash, :sym.hash, Object.new.inspect]`)
	b := evalValue(t, testEngine, `["glovebox".hash, :sym.hash, Object.new.inspect]`)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("hash seed or layout differs between VMs: %v vs %v", a, b)
	}
}
