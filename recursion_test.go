// Deep recursion: nested data in C methods, SystemStackError, setjmp across deep stacks.

package glovebox_test

import (
	"fmt"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Core methods that recurse in C once per level of nesting work on data
// thousands of levels deep. ruby.wasm's Asyncify setjmp copied the whole
// wasm stack into a 24 KiB buffer at each level and crashed the VM at about
// 90 levels of Array#inspect (52 of Hash#to_s); glovebox rewrites the image
// so a setjmp copies only its caller's frame (internal/wasmbin, PatchSjlj).
func TestDeepNestingInCoreMethods(t *testing.T) {
	for _, c := range []struct {
		name, code string
		want       any
	}{
		{"inspect 92", `a = []; 92.times { a = [a] }; a.inspect.size`, int64(186)},
		{"inspect 2000", `a = []; 2000.times { a = [a] }; a.inspect.size`, int64(4002)},
		{"hash 1500", `a = []; 1500.times { a = [a] }; a.hash.is_a?(Integer)`, true},
		{"Hash#to_s 1500", `h = {}; 1500.times { h = {a: h} }; h.to_s.size`, int64(5*1500 + 2)},
		{"== 2000", `a = []; b = []; 2000.times { a = [a]; b = [b] }; a == b`, true},
		{"Marshal 3000", `a = []; 3000.times { a = [a] }; Marshal.dump(Marshal.load(Marshal.dump(a))).size`, int64(6004)},
		{"JSON 5000", `require "json"; a = []; 5000.times { a = [a] }; JSON.generate(a, max_nesting: false).size`, int64(10002)},
		{"Comparable 1000", `a = []; b = []; 1000.times { a = [a, 1]; b = [b, 2] }; a <=> b`, int64(-1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, rt, c.code)
			wantStatus(t, res, glovebox.StatusOK)
			if !equalValue(res.Value, c.want) {
				t.Fatalf("value %v, want %v", res.Value, c.want)
			}
		})
	}
}

// Past the depth the stack allows, the guest gets a SystemStackError it
// can rescue, and the VM goes on working in the same eval.
func TestDeepNestingRaisesRescuableSystemStackError(t *testing.T) {
	for _, op := range []string{`a.inspect`, `a.hash`, `{k: a}.to_s`, `a.to_s`} {
		t.Run(op, func(t *testing.T) {
			code := fmt.Sprintf(`a = []; 100_000.times { a = [a] }
				r = begin; %s; :no_error; rescue SystemStackError => e; [e.class.name, e.backtrace.size > 100]; end
				[r, [1, [2, {b: 3}]].inspect, (raise "x" rescue $!.message)]`, op)
			res := eval(t, rt, code)
			wantStatus(t, res, glovebox.StatusOK)
			want := []any{[]any{"SystemStackError", true}, `[1, [2, {b: 3}]]`, "x"}
			if !equalValue(res.Value, want) {
				t.Fatalf("value %v, want %v", res.Value, want)
			}
		})
	}
}

// setjmp and longjmp across many levels of C recursion: an exception, a
// throw and a GC at the bottom of 1,000 levels that alternate a Ruby
// inspect (with an ensure) and Array#inspect (rb_exec_recursive, a setjmp
// per level); every ensure runs, objects survive the GC's scan of the deep
// stack, and the value is exact.
func TestSetjmpAcrossDeepRecursion(t *testing.T) {
	for _, c := range []struct {
		name, leaf, run string
		want            any
	}{
		{"raise", `raise ArgumentError, "bottom"`, `begin; a.inspect; rescue ArgumentError => e; [e.message, $n]; end`, []any{"bottom", int64(0)}},
		{"throw", `throw :out, :thrown`, `[catch(:out) { a.inspect }, $n]`, []any{"thrown", int64(0)}},
		{"GC", `GC.start; "leaf"`, `s = a.inspect; [s.size, s.end_with?("[[leaf]]" + "]" * 1998), $n]`, []any{int64(4004), true, int64(0)}},
		{"rescued inside", `(raise "inner" rescue "saved")`, `[a.inspect.size, $n]`, []any{int64(4005), int64(0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := `$n = 0
				class Leaf; def inspect = (` + c.leaf + `); end
				class Wrap; def initialize(x) = @x = x
				  def inspect; $n += 1; begin; "[" + @x.inspect + "]"; ensure; $n -= 1; end; end; end
				a = Leaf.new; 1000.times { a = Wrap.new([a]) }
				` + c.run
			res := eval(t, rt, code)
			wantStatus(t, res, glovebox.StatusOK)
			if !equalValue(res.Value, c.want) {
				t.Fatalf("value %v, want %v", res.Value, c.want)
			}
		})
	}
}

// An exception rethrown by a C function that set a tag (rb_ensure under
// Hash#each) into a block's vm_exec, thousands of times with the heap
// shifting: vm_exec's tag jmp_buf is malloc'd and is never captured by a
// setjmp, so it could hold the owner tag an earlier capture at the same
// address left, and the rethrowing function's setjmp wrapper (same
// shadow-stack pointer and depth) claimed the longjmp and rewound from
// that stale buffer: the VM crashed with an unreachable instruction.
// (Found when requiring every gem in the image, TestImageGemsRequire.)
func TestSetjmpRethrowIntoReusedTag(t *testing.T) {
	res := eval(t, rt, `h = { a: 1 }
		r = 0
		2000.times do |i|
		  s = "x" * (i % 97)
		  [1, 2].each_with_index do |_, j|
		    begin
		      if (i + j).odd?
		        h.each { raise IndexError }
		      else
		        [3].each_slice(1) { h.each { raise KeyError } }
		      end
		    rescue IndexError, KeyError
		      r += 1
		    end
		  end
		  h.each { |k, v| r += v }
		end
		r`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, int64(6000)) {
		t.Fatalf("value %v, want 6000", res.Value)
	}
}
