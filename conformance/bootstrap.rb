# The conformance bootstrap: the one Ruby program run on both sides, glovebox
# and the baseline, byte for byte (the runner fills in the file list). It
# runs mspec in this process and reports every example on STDOUT as a
# record line: "\n\x1eGB KIND FIELD...\n", each field Base64 (so a
# description may hold any byte). Kinds: L file (loading starts), U file
# (loading ended), P/F/E description message (an example passed, failed an
# expectation, raised), X description message (an exception outside any
# example, such as a load error), D (the run ended).
gb_out = STDOUT
gb_emit = lambda do |kind, *fields|
  gb_out.write("\n\x1eGB #{kind}#{fields.map { |f| " " + [f.to_s.b].pack("m0") }.join}\n")
  gb_out.flush
rescue Exception
  nil
end
ENV["SPEC_TEMP_DIR"] = "/tmp/rubyspec_temp"
# mspec's temp-file helper refuses to run with a umask of 0 (it would make
# world-writable files). WASI has no umask: wasi-libc's umask() does
# nothing and returns 0, so under plain WASI File.umask is 0 whatever it is
# set to. Where setting it does not stick, keep the value in Ruby (file
# modes are not masked by it) so the specs that use temp files run at all;
# where the platform has a umask (glovebox may emulate one), it is only
# set to the usual 022.
File.umask(0o022)
if File.umask == 0
  gb_umask = 0o022
  File.singleton_class.prepend(Module.new do
    define_method(:umask) do |*args|
      raise ArgumentError, "wrong number of arguments (given #{args.size}, expected 0..1)" if args.size > 1
      old = gb_umask
      gb_umask = Integer(args[0].to_int) & 0o777 unless args.empty?
      old
    end
  end)
end
$LOAD_PATH.unshift("/mspec/lib")
# Without RubyGems, the image's bundled gems (csv, matrix, prime, ...) are
# not on the load path. glovebox adds their lib directories at boot; this
# adds the same list where it is missing (so on the baseline only), so the
# library specs for them compare like for like.
$LOAD_PATH.concat(
  (Dir.glob("/usr/local/lib/ruby/gems/*/gems/*/lib") -
   Dir.glob("/usr/local/lib/ruby/gems/*/specifications/default/*.gemspec").map do |s|
     s.sub(%r{/specifications/default/([^/]+)\.gemspec\z}) { "/gems/#{$1}/lib" }
   end).sort - $LOAD_PATH
)
# There is no ruby executable in either sandbox; the specs that need one
# guard themselves on WASI.
RUBY_EXE = "/ruby"
require "mspec/commands/mspec-run"
require "mspec/runner/formatters/base"

# What an exception said: mspec's message (the class first, for errors),
# its first lines, at most 400 bytes.
gb_message = lambda do |exc|
  msg = begin
    exc.message.to_s
  rescue Exception
    "(message unavailable)"
  end
  msg.b.lines.first(4).map(&:chomp).join(" | ")[0, 400]
end

gb_formatter = Class.new(BaseFormatter) do
  define_method(:register) do
    super()
    MSpec.register :load, self
    MSpec.register :unload, self
  end
  define_method(:load) { gb_emit.call("L", MSpec.file) }
  define_method(:unload) do
    super()
    gb_emit.call("U", MSpec.file)
  end
  define_method(:before) do |state = nil|
    super(state)
    @gb_exceptions = []
  end
  define_method(:exception) do |exc|
    super(exc)
    if @current_state
      @gb_exceptions << exc
    else
      gb_emit.call("X", exc.description, gb_message.call(exc))
    end
  end
  define_method(:after) do |state = nil|
    if state && @current_state
      excs = @gb_exceptions || []
      if excs.empty?
        gb_emit.call("P", state.description)
      else
        kind = excs.all?(&:failure?) ? "F" : "E"
        gb_emit.call(kind, state.description, gb_message.call(excs.first))
      end
    end
    super(state)
  end
  define_method(:finish) { gb_emit.call("D") }
end

gb_run = Class.new(MSpecRun) do
  define_method(:config_formatter) do
    config[:formatter] = gb_formatter.new
  end
end

ARGV.replace(["-B", "/spec/default.mspec", *GB_FILES])
begin
  gb_run.main
rescue SystemExit
  nil
end
nil
