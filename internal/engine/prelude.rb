# glovebox guest prelude. Evaluated once while the boot snapshot is made;
# every VM starts with its effects in place. It runs before any untrusted
# code, but nothing here is a secret or a privilege: the host checks every
# message that crosses the channel as if the guest had written it.
require "json"
require "js"

# Ruby 4.0 ships csv, matrix, prime, benchmark, logger and other former
# standard libraries as bundled gems; the guest runs without RubyGems, so
# every bundled gem's lib directory goes on the load path (after the
# standard library, so requiring anything else finds it where it did).
# Default gems are already in the standard library directory.
$LOAD_PATH.concat(
  (Dir.glob("/usr/local/lib/ruby/gems/*/gems/*/lib") -
   Dir.glob("/usr/local/lib/ruby/gems/*/specifications/default/*.gemspec").map do |s|
     s.sub(%r{/specifications/default/([^/]+)\.gemspec\z}) { "/gems/#{$1}/lib" }
   end).sort - $LOAD_PATH
)

$stdout.sync = true
$stderr.sync = true

module Glovebox
  # Base class of the errors glovebox raises inside the guest.
  class Error < StandardError; end
  # A host tool failed, was vetoed, or was called with bad arguments.
  class ToolError < Error; end
  # A call was denied: by a person (approval) or by the data-flow policy.
  # It exists from the start, so a rescue clause naming it works before
  # any call was denied.
  class ToolDenied < ToolError; end
  # Glovebox.call named a tool the host did not expose.
  class UnknownToolError < Error; end
  # The value of the last expression cannot cross to the host.
  class ValueError < Error; end

  MAX_DEPTH = 64
  # Integers wider than this (about 10,000 decimal digits) do not cross:
  # parsing longer ones costs the host time the guest does not pay for.
  MAX_INTEGER_BITS = 33_000
  GEN = JSON::State.new(allow_nan: true, max_nesting: false)
  MAX_MESSAGE = 16 * 1024
  MAX_FRAMES = 50
  ERRORS = {
    "ToolError" => ToolError, "UnknownToolError" => UnknownToolError, "ToolDenied" => ToolDenied,
    "TypeError" => TypeError, "ArgumentError" => ArgumentError,
  }.freeze

  # The js extension's module, kept (JS itself is removed below) as the
  # one channel to the host: CHANNEL.eval(message).to_s sends a message
  # and returns the host's answer. The host checks every message; what
  # else the module offers, the host refuses.
  CHANNEL = JS
  UTF8 = Encoding::UTF_8
  ASCII = Encoding::US_ASCII
  # Bytes cross as {"$base64" => "<base64>"}: a binary (ASCII-8BIT)
  # String that is not all ASCII goes to the host as that Hash, which the
  # host reads as bytes, and the host's bytes come back as binary Strings.
  BINARY_KEY = "$base64"
  BINARY_MARK = '"$base64"'
  BINARY = Encoding::BINARY
  # One message to the host and its answer, both strings.
  define_singleton_method(:__send) { |op, payload| CHANNEL.eval("#{op}\n#{payload}").to_s }
  define_singleton_method(:__raw) { |message| CHANNEL.eval(message).to_s }
  private_class_method :__send

  class << self
    # Calls the host tool name; what the tool returns comes back as data.
    def call(name, *args, **kwargs)
      prefix = "call\n#{name}\n"
      m = kwargs.empty? && __flat(prefix, args)
      m ||= prefix + GEN.generate([__data(args, 0, {}.compare_by_identity), __data(kwargs, 0, {}.compare_by_identity)])
      __answer(CHANNEL.eval(m).to_s)
    end

    # The message for a call of a tool (prefix is "call\n<name>\n") with
    # positional arguments args and no keywords, in the host's flat form,
    # when every argument is a scalar it carries: nil, true, false, an
    # Integer of at most 63 bits and a sign, a Float, a Symbol, or a valid
    # UTF-8 or US-ASCII String. Otherwise nil: the call then goes through
    # Glovebox.call, which encodes any data. The flat form is "~" and one
    # item per argument: n, t, f, i<digits>; d<Float#to_s>; or
    # s<bytes>:<string>. It spares the guest the JSON generator, which
    # costs several microseconds a call here (its recursion guard uses
    # setjmp, which ruby.wasm emulates).
    def __flat(prefix, args)
      n = args.size
      return prefix if n == 0
      s = "#{prefix}~"
      i = 0
      while i < n # not each: a block costs more here
        x = args[i]
        i += 1
        case x
        when Integer
          return nil if x.bit_length > 63
          s << "i#{x};"
        when String
          e = x.encoding
          return nil unless (e == UTF8 || e == ASCII) && x.valid_encoding?
          s << "s#{x.bytesize}:" << x
        when Symbol
          x = x.name
          return nil unless x.encoding == UTF8 && x.valid_encoding?
          s << "s#{x.bytesize}:" << x
        when nil then s << "n".freeze
        when true then s << "t".freeze
        when false then s << "f".freeze
        when Float then s << "d#{x};"
        else return nil
        end
      end
      s
    end

    # Decodes the host's answer to a call: a value and its type tag as the
    # last byte (n, t, f; "42i"; "texts"; "[1,2]j" in the wire form), or
    # "<class>\n<message>e" for an error to raise.
    def __answer(s)
      case s.getbyte(-1)
      when 105 then s.to_i # i
      when 115 then s.chop! || s # s (already UTF-8)
      when 110 then nil # n
      when 116 then true # t
      when 102 then false # f
      when 106 # j
        v = JSON.parse(s.chop!, allow_nan: true, max_nesting: false)
        s.include?(BINARY_MARK) ? __bytes(v) : v
      else
        klass, message = s.byteslice(0, s.bytesize - 1).split("\n", 2)
        raise __error_class(klass.to_s), message.to_s
      end
    end

    # Replaces, in data the host sent, each {"$base64" => String} Hash
    # (bytes: a Go []byte) with the bytes as a binary String.
    def __bytes(v)
      case v
      when Array then v.map! { |x| __bytes(x) }
      when Hash
        if v.size == 1 && String === (b = v[BINARY_KEY])
          begin
            b.unpack1("m0")
          rescue ArgumentError # not strict base64: a Hash, as the host reads it too
            v
          end
        else
          v.each { |k, x| v[k] = __bytes(x) }
        end
      else v
      end
    end

    # The class a tool error is raised as: a built-in one, or a subclass
    # of ToolError the host named, made on first use. A name the guest
    # took for something else falls back to ToolError.
    def __error_class(name)
      ERRORS.fetch(name) do
        next ToolError unless name.match?(/\A[A-Z][A-Za-z0-9_]{0,63}\z/)
        k = const_defined?(name, false) ? const_get(name, false) : const_set(name, Class.new(ToolError))
        k.is_a?(Class) && k < ToolError ? k : ToolError
      end
    end

    # Tool error classes exist before their first use, so a rescue
    # clause naming one (rescue Glovebox::HTTPHostError) works even when
    # nothing has raised it yet: any missing Glovebox constant whose name
    # ends in "Error" is made a ToolError subclass.
    def const_missing(name)
      return super unless name.to_s.match?(/\A[A-Z][A-Za-z0-9_]{0,58}Error\z/)
      const_set(name, Class.new(ToolError))
    end

    # Reseeds Kernel#rand from the host's CSPRNG. Run once per VM, before
    # any untrusted code.
    # Also defines the host's tools: plain private methods on Object,
    # compiled in one class_eval while the VM is prepared (it costs about
    # 300,000 fuel a tool); a call without keywords whose arguments are
    # scalars (the common case) is sent in the flat form (see __flat).
    # The method writes the commonest flat messages itself: no arguments,
    # one or two Integers of at most 63 bits and a sign, or one valid
    # UTF-8 or US-ASCII String (the same bytes __flat makes, without its
    # call and loop), and reads integer and string answers itself: add(1, 2)
    # costs about 16,800 fuel instead of 24,000.
    def __prepare
      src = +"# frozen_string_literal: true\n"
      tools = JSON.parse(__send("req", ""))["tools"]
      tools.each do |name|
        raise ArgumentError, "bad tool name #{name.inspect}" unless name.match?(/\A[a-z_][A-Za-z0-9_]*[?!]?\z/)
        pre = "call\n#{name}\n~"
        src << "private def #{name}(*args, **kwargs)\n" \
               "  if kwargs.empty?\n" \
               "    case args.size\n" \
               "    when 0 then m = #{"call\n#{name}\n".dump}\n" \
               "    when 1 then a = args[0]\n" \
               "      if Integer === a then m = \"#{pre.dump[1..-2]}i\#{a};\" if a.bit_length < 64\n" \
               "      elsif String === a && ((e = a.encoding) == Glovebox::UTF8 || e == Glovebox::ASCII) && a.valid_encoding?\n" \
               "        m = \"#{pre.dump[1..-2]}s\#{a.bytesize}:\#{a}\"\n" \
               "      end\n" \
               "    when 2 then a = args[0]; b = args[1]\n" \
               "      m = \"#{pre.dump[1..-2]}i\#{a};i\#{b};\" if Integer === a && Integer === b && a.bit_length < 64 && b.bit_length < 64\n" \
               "    end\n" \
               "    m ||= Glovebox.__flat(#{"call\n#{name}\n".dump}, args)\n" \
               "  end\n" \
               "  return Glovebox.call(#{name.dump}, *args, **kwargs) unless m\n" \
               "  s = Glovebox::CHANNEL.eval(m).to_s\n" \
               "  case s.getbyte(-1)\n" \
               "  when 105 then s.to_i\n" \
               "  when 115 then s.chop! || s\n" \
               "  else Glovebox.__answer(s)\n" \
               "  end\nend\n"
      end
      Object.class_eval(src, "<glovebox>", 0) unless tools.empty?
      nil
    end

    # Runs the request the host holds for this VM and returns the result
    # as a wire string.
    def __run
      req = JSON.parse(__send("req", ""))
      max_value = req["max_value"]
      out = begin
        __input(req)
        value = TOPLEVEL_BINDING.eval(req["code"], "sandbox", 1)
        json = JSON.generate({ "status" => "ok", "value" => __data(value, 0, {}.compare_by_identity) },
                             allow_nan: true, max_nesting: false)
        if json.bytesize > max_value
          raise ValueError, "the value of the last expression is #{json.bytesize} bytes as data, over the " \
                            "#{max_value}-byte limit; return a smaller value or print a summary"
        end
        json
      rescue Exception => e # everything the guest raised, SystemExit and NoMemoryError included
        JSON.generate({ "status" => "error", "error" => __error(e) }, allow_nan: true, max_nesting: false)
      ensure
        __flush
      end
      out
    end

    # Writes out what the guest left in the buffers of IO objects on fd 1
    # and 2 (STDOUT, STDERR, whatever $stdout and $stderr are, and IO.new /
    # for_fd / dup on those descriptors), so the output belongs to the eval
    # that wrote it. The host calls it again after a trap.
    def __flush
      [STDOUT, STDERR, $stdout, $stderr, *OUTPUTS.keys].each do |io|
        io.flush if IO === io && !io.closed?
      rescue Exception
        nil
      end
      nil
    end

    def __error(e)
      message = begin
        e.message.to_s
      rescue Exception
        "(message unavailable)"
      end
      # exit 3 and abort "msg" raise SystemExit; its message alone ("exit",
      # or abort's text) drops the status the program chose.
      if e.is_a?(SystemExit)
        message = message == "exit" ? "exit #{e.status}" : "#{message} (exit #{e.status})"
      end
      frames = Array(e.backtrace).reject { |f| f.start_with?("<glovebox>:", "eval:", "-e:") }.first(MAX_FRAMES)
      { "class" => __str(e.class.name || e.class.inspect), "message" => __str(message[0, MAX_MESSAGE]),
        "backtrace" => frames.map { |f| __str(f) } }
    end

    # A UTF-8 copy of s: binary strings are read as UTF-8, other encodings
    # transcoded, and invalid bytes replaced by U+FFFD.
    def __str(s)
      s = s.to_s
      unless s.encoding == Encoding::UTF_8
        s = if s.encoding == Encoding::BINARY || s.encoding == Encoding::US_ASCII
              s.dup.force_encoding(Encoding::UTF_8)
            else
              begin
                s.encode(Encoding::UTF_8, invalid: :replace, undef: :replace)
              rescue EncodingError
                s.dup.force_encoding(Encoding::UTF_8)
              end
            end
      end
      s.valid_encoding? ? s : s.scrub
    end

    def __key(k)
      case k
      when String then __str(k)
      when Symbol then __str(k.name)
      else __inspect(k)
      end
    end

    def __inspect(v)
      __str(v.inspect)
    rescue Exception
      "#<#{v.class rescue 'Object'}>"
    end

    def __data(v, depth, seen)
      case v
      when Integer
        return v if v.bit_length <= MAX_INTEGER_BITS
        raise ValueError, "an Integer of #{v.bit_length} bits is too large to cross (the limit is " \
                          "#{MAX_INTEGER_BITS} bits, about 10,000 digits); pass it as a String"
      when nil, true, false, Float then v
      when String
        v.encoding == BINARY && !v.ascii_only? ? { BINARY_KEY => [v].pack("m0") } : __str(v)
      when Symbol then __str(v.name)
      when Array, Hash
        return(v.is_a?(Array) ? "[...]" : "{...}") if seen.key?(v)
        if depth >= MAX_DEPTH
          raise ValueError, "the value nests deeper than #{MAX_DEPTH} levels; flatten it or return a summary " \
                            "(not its inspect: here C methods such as inspect, to_s and hash crash on data nested " \
                            "more than about 50 levels)"
        end
        seen[v] = true
        out = if v.is_a?(Array)
                v.map { |x| __data(x, depth + 1, seen) }
              else
                v.each_with_object({}) { |(k, x), h| h[__key(k)] = __data(x, depth + 1, seen) }
              end
        seen.delete(v)
        out
      else __inspect(v)
      end
    end
  end
end

# IO objects the guest makes on fd 1 and 2, for __flush (weakly held).
module Glovebox
  OUTPUTS = ObjectSpace::WeakMap.new
  module TrackOutput
    def initialize(...) # keyword options (mode:, autoclose:, encoding: ...) pass through
      super
      OUTPUTS[self] = true if (fileno rescue nil)&.between?(1, 2)
    end

    def initialize_copy(orig)
      super
      OUTPUTS[self] = true if OUTPUTS.key?(orig) || (orig.fileno rescue nil)&.between?(1, 2)
    end
  end
end
IO.prepend(Glovebox::TrackOutput)

# WASI has no processes, but some of Ruby's process calls report success
# (system returns true, spawn nil) instead of failing. Make every one fail
# plainly.
module Glovebox
  NO_PROCESSES = "the glovebox sandbox cannot start processes"
end
%i[system spawn exec fork ` ].each do |name|
  Kernel.send(:define_method, name) { |*, **| raise NotImplementedError, "#{name}: #{Glovebox::NO_PROCESSES}" }
  Kernel.send(:private, name)
  Kernel.define_singleton_method(name) { |*, **| raise NotImplementedError, "#{name}: #{Glovebox::NO_PROCESSES}" }
end
%i[spawn exec fork daemon kill wait waitpid wait2 detach].each do |name|
  Process.define_singleton_method(name) { |*, **| raise NotImplementedError, "Process.#{name}: #{Glovebox::NO_PROCESSES}" }
end
IO.define_singleton_method(:popen) { |*, **| raise NotImplementedError, "IO.popen: #{Glovebox::NO_PROCESSES}" }


# Libraries that cannot work in WASI, by the feature whose absence stops
# them. A require that fails on one says why, not just "cannot load such
# file -- socket". The engine's tests keep this list and the image in step.
module Glovebox
  UNAVAILABLE = {
    "socket" => "the sandbox has no sockets (the socket extension is not in the WASI image); " \
                "reach the network through the host's tools, if it granted any",
    "io/console" => "the sandbox has no terminal (the io/console extension is not in the WASI image)",
    "rbs" => "the rbs gem (a native extension) is not in the WASI image",
    "pty" => "the sandbox has no terminal or processes",
    "io/wait" => "the io/wait extension is not in the WASI image",
  }.freeze

  # Kernel#require with a reason for a library the sandbox cannot load.
  # Kernel#require, wrapped in place rather than by a prepended module,
  # so that Kernel's and Object's ancestors stay CRuby's.
  orig_require = Kernel.instance_method(:require)
  Kernel.send(:define_method, :require) do |feature|
    orig_require.bind_call(self, feature)
  rescue LoadError => e
    why = UNAVAILABLE[e.path.to_s]
    raise unless why && !e.message.include?("glovebox")
    what = e.path.to_s == feature.to_s ? feature.to_s : "#{feature} (it needs #{e.path})"
    err = LoadError.new("cannot load such file -- #{what}: #{why} [glovebox]")
    err.instance_variable_set(:@path, e.path)
    raise err, cause: nil
  end
  Kernel.send(:private, :require)
end

# There is one Ruby thread and no scheduler: say so, and what to do
# instead, rather than Ruby's "initialize() function is unimplemented".
module Glovebox
  NO_THREADS = "threads are unavailable in the glovebox sandbox (one thread, no scheduler): run the work " \
               "inline, interleave with Fiber or Enumerator, and use Timeout.timeout for a time limit"
end
%i[new start fork].each do |name|
  Thread.define_singleton_method(name) { |*, **| raise NotImplementedError, "Thread.#{name}: #{Glovebox::NO_THREADS}" }
end
Ractor.define_singleton_method(:new) { |*, **| raise NotImplementedError, "Ractor.new: #{Glovebox::NO_THREADS}" }

# Timeout.timeout without threads. The timeout gem runs a watcher thread;
# here a TracePoint, enabled only while a timeout block runs, compares
# the clock with the nearest deadline every few events (line, call, block
# and C-method returns) and raises in the running code, and sleep wakes
# at the deadline. Code that produces no event (an empty `while true; end`,
# one long C call) is cut at its next event or by the eval's own deadline.
require "timeout"
module Glovebox
  module Deadlines
    # Frames of the running timeout blocks, outermost first:
    # [deadline (monotonic seconds), exception class or nil, message, token].
    STACK = []
    CHECK_EVERY = 64

    class << self
      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

      # Raises for the outermost expired frame; called from the trace
      # hook every CHECK_EVERY events, from sleep, and after each block.
      def check
        t = now
        STACK.each do |f|
          next if f[4] || f[0] > t
          f[4] = true # fired: raise once, then let it unwind
          raise f[1], f[2] if f[1]
          raise f[3]
        end
        nil
      end

      # Seconds to the nearest pending deadline, or nil.
      def remaining
        f = STACK.reject { |x| x[4] }.min_by(&:first)
        f && [f[0] - now, 0].max
      end

      def run(sec, klass, message)
        message ||= "execution expired"
        token = Timeout::ExitException.new(message)
        frame = [now + sec, klass, message, token, false]
        STACK.push(frame)
        TRACE.enable unless TRACE.enabled?
        begin
          value = yield(sec)
          check
          value
        rescue Timeout::ExitException => e
          raise unless e.equal?(token)
          raise Timeout::Error, message, e.backtrace, cause: nil
        ensure
          STACK.delete(frame)
          TRACE.disable if STACK.empty?
        end
      end
    end

    # Ruby method calls, block calls (loop, each, times), lines and C
    # method returns: every loop with a body makes one of these (a
    # one-line `while` body makes no line event but calls Integer#+ and
    # the like). Each event costs about 3.5 us in the guest, so code in a
    # timeout block runs many times slower (measured: a 200,000-step
    # `times` loop went from 30 ms to 6 s).
    countdown = CHECK_EVERY
    TRACE = TracePoint.new(:line, :call, :b_call, :c_return) do
      if (countdown -= 1) <= 0
        countdown = CHECK_EVERY
        Deadlines.check
      end
    end
  end

  # sleep inside a timeout block wakes at the deadline (wrapped in
  # place, as require is).
  orig_sleep = Kernel.instance_method(:sleep)
  Kernel.send(:define_method, :sleep) do |*args|
    left = Deadlines.remaining
    return orig_sleep.bind_call(self, *args) if left.nil?
    d = args.first
    if d.nil? || d > left
      orig_sleep.bind_call(self, left)
      Deadlines.check
      return orig_sleep.bind_call(self, *args) if d.nil? # a deadline fired elsewhere: keep going
      return d.round
    end
    orig_sleep.bind_call(self, *args)
  end
  Kernel.send(:private, :sleep)
end

module Timeout
  # Runs the block and raises Timeout::Error (or klass, with message) if
  # it is still running after sec seconds; nil or 0 means no limit.
  def self.timeout(sec, klass = nil, message = nil, &block)
    return yield(sec) if sec.nil? || sec.zero?
    raise ArgumentError, "Timeout sec must be a non-negative number" if sec.negative?
    Glovebox::Deadlines.run(sec, klass, message, &block)
  end

  private

  def timeout(*args, &block) = Timeout.timeout(*args, &block)
end

# Local time is always UTC: WASI has no time zone database, so TZ cannot
# take effect. Setting it warns instead of being ignored in silence.
module Glovebox
  TZ_WARNING = "warning: ENV[\"TZ\"] has no effect in the glovebox sandbox: local time is always UTC " \
               "(WASI has no time zone data); use an offset, e.g. Time.now.getlocal(\"+09:00\")"

  module TZWarning
    def []=(name, value)
      if name.to_s == "TZ" && !value.nil? && !%w[UTC UTC0 GMT Etc/UTC :UTC].include?(value.to_s)
        $stderr.puts(TZ_WARNING)
      end
      super
    end

    alias_method :store, :[]= # an alias, as in ENV itself
  end
end
ENV.singleton_class.prepend(Glovebox::TZWarning)


# A process environment for programs that expect one, with nothing of
# the host's in it (ENV stays empty unless the guest sets a variable):
#
# - a home directory: Dir.home and "~" in File.expand_path name the
#   scratch directory, /tmp, while HOME is unset (as the password
#   database would on a system; WASI has none). A HOME the guest sets
#   wins, as in CRuby.
# - a umask: File.umask starts at 0o022 and keeps what the guest sets
#   (WASI has no umask, and its stat reports no permission bits, so
#   nothing in the guest can observe it otherwise; files the guest makes
#   on the host get the host process's default modes).
# - io/nonblock: the image does not include the extension; the same
#   methods, on fcntl's O_NONBLOCK, which WASI supports.
module Glovebox
  HOME = "/tmp"

  def self.__home(path)
    path = path.to_path if !path.is_a?(String) && path.respond_to?(:to_path)
    return path unless path.is_a?(String) && path.start_with?("~") && (path.size == 1 || path[1] == "/")
    HOME + path[1..]
  end
  private_class_method :__home

  module Home
    def home(*args)
      return super if !args.empty? && !args[0].nil? || ENV.key?("HOME")
      HOME.dup
    end
  end

  module ExpandHome
    def expand_path(path, *rest)
      unless ENV.key?("HOME")
        path = Glovebox.send(:__home, path)
        rest[0] = Glovebox.send(:__home, rest[0]) if rest.size == 1 && !rest[0].nil?
      end
      super
    end
  end

  module Umask
    @mask = 0o022
    class << self
      attr_accessor :mask
    end

    def umask(*args)
      raise ArgumentError, "wrong number of arguments (given #{args.size}, expected 0..1)" if args.size > 1
      old = Umask.mask
      unless args.empty?
        m = args[0]
        m = m.to_int if !m.is_a?(Integer) && m.respond_to?(:to_int)
        raise TypeError, "no implicit conversion of #{args[0].class} into Integer" unless m.is_a?(Integer)
        raise RangeError, "integer #{m} too big to convert to 'unsigned int'" if m > 0xFFFF_FFFF
        raise RangeError, "integer #{m} too small to convert to 'unsigned int'" if m < -0x8000_0000
        Umask.mask = m & 0o777
      end
      old
    end
  end
end
Dir.singleton_class.prepend(Glovebox::Home)
File.singleton_class.prepend(Glovebox::ExpandHome)
File.singleton_class.prepend(Glovebox::Umask)

class IO
  F_GETFL_ = 3 # Fcntl::F_GETFL and F_SETFL in wasi-libc
  F_SETFL_ = 4
  private_constant :F_GETFL_, :F_SETFL_

  def nonblock?
    fcntl(F_GETFL_).anybits?(File::NONBLOCK)
  end

  def nonblock=(nb)
    flags = fcntl(F_GETFL_)
    fcntl(F_SETFL_, nb ? flags | File::NONBLOCK : flags & ~File::NONBLOCK)
  end

  def nonblock(nb = true)
    old = nonblock?
    self.nonblock = nb
    begin
      yield self
    ensure
      self.nonblock = old
    end
  end
end
$LOADED_FEATURES << "io/nonblock.so"

Object.send(:remove_const, :JS)

# Each eval's input (the host's stdin, argument and environment
# options): $stdin and STDIN read the bytes the host gave, ARGV holds its
# arguments. Both are set afresh for every eval, so in a session one
# eval's input never reaches the next. ENV is replaced by the host's
# variables when it gives some (an eval without them keeps the ENV its VM
# has: empty in a fresh one). With no input they are the process's own standard
# input, an IO at end of file at once (the VM's fd 0 has nothing behind
# it), as in CRuby; with input, a StringIO holding it.
require "stringio"
module Glovebox
  STDIN_IO = STDIN

  def self.__input(req)
    raw = req["stdin"]
    io = if (raw.nil? || raw.empty?) && !STDIN_IO.closed?
           STDIN_IO
         else
           StringIO.new((raw || "").unpack1("m0").force_encoding(Encoding.default_external).freeze)
         end
    $stdin = io
    Object.send(:remove_const, :STDIN)
    Object.const_set(:STDIN, io)
    ARGV.replace(req["argv"] || [])
    ENV.replace(req["env"]) if req.key?("env")
    nil
  end
  private_class_method :__input
end
