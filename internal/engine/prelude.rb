# glovebox guest prelude. Evaluated once while the boot snapshot is made;
# every VM starts with its effects in place. It runs before any untrusted
# code, but nothing here is a secret or a privilege: the host checks every
# message that crosses the channel as if the guest had written it.
require "json"
require "js"

# Ruby 4.0 ships csv, matrix, prime and other former standard libraries
# as bundled gems; the guest runs without RubyGems, so their directories
# go on the load path for `require "csv"` to work as users expect.
$LOAD_PATH.concat(Dir.glob("/usr/local/lib/ruby/gems/*/gems/{csv,matrix,prime,rexml,rss,base64,ostruct,abbrev,observer,mutex_m,getoptlong}-*/lib").sort)

$stdout.sync = true
$stderr.sync = true

module Glovebox
  # Base class of the errors glovebox raises inside the guest.
  class Error < StandardError; end
  # A host tool failed, was vetoed, or was called with bad arguments.
  class ToolError < Error; end
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
    "ToolError" => ToolError, "UnknownToolError" => UnknownToolError,
    "TypeError" => TypeError, "ArgumentError" => ArgumentError,
  }.freeze

  eval_js = JS.method(:eval)
  # One message to the host and its answer, both strings.
  define_singleton_method(:__send) { |op, payload| eval_js.call("#{op}\n#{payload}").to_s }
  define_singleton_method(:__raw) { |message| eval_js.call(message).to_s }
  private_class_method :__send

  class << self
    # Calls the host tool name; what the tool returns comes back as data.
    def call(name, *args, **kwargs)
      name = name.to_s
      payload = if args.empty? && kwargs.empty?
                  "#{name}\n"
                else
                  "#{name}\n#{GEN.generate([__data(args, 0, {}.compare_by_identity), __data(kwargs, 0, {}.compare_by_identity)])}"
                end
      __answer(__send("call", payload))
    end

    # Decodes the host's answer to a call: "ok" and a typed value, or "err",
    # a class and a message.
    def __answer(s)
      case s.getbyte(0)
      when 110 then nil # n
      when 116 then true # t
      when 102 then false # f
      when 105 then Integer(s.byteslice(2, s.bytesize), 10) # i
      when 115 then s.byteslice(2, s.bytesize).force_encoding(Encoding::UTF_8) # s
      when 106 then JSON.parse(s.byteslice(2, s.bytesize), allow_nan: true, max_nesting: false) # j
      else
        _, klass, message = s.split("\n", 3)
        raise __error_class(klass), message.to_s
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
    # 300,000 fuel a tool); a no-argument call, the common case, skips
    # argument encoding altogether.
    def __prepare
      srand(Random.new_seed)
      src = +""
      JSON.parse(__send("req", ""))["tools"].each do |name|
        raise ArgumentError, "bad tool name #{name.inspect}" unless name.match?(/\A[a-z_][A-Za-z0-9_]*[?!]?\z/)
        src << "private def #{name}(*args, **kwargs)\n" \
               "  return Glovebox.__answer(Glovebox.__raw(#{"call\n#{name}\n".dump})) if args.empty? && kwargs.empty?\n" \
               "  Glovebox.call(#{name.dump}, *args, **kwargs)\nend\n"
      end
      Object.class_eval(src, "<glovebox>", 1) unless src.empty?
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
      end
      out
    end

    def __error(e)
      message = begin
        e.message.to_s
      rescue Exception
        "(message unavailable)"
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
      when String then __str(v)
      when Symbol then __str(v.name)
      when Array, Hash
        return(v.is_a?(Array) ? "[...]" : "{...}") if seen.key?(v)
        if depth >= MAX_DEPTH
          raise ValueError, "the value nests deeper than #{MAX_DEPTH} levels; flatten it or return its inspect string"
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

Object.send(:remove_const, :JS)

# Each eval's input (the host's stdin and argument options): $stdin and
# STDIN read the bytes the host gave (none: at end of file at once), ARGV
# holds its arguments. Both are set afresh for every eval, so in a session
# one eval's input never reaches the next.
require "stringio"
module Glovebox
  def self.__input(req)
    data = (req["stdin"] || "").unpack1("m0").force_encoding(Encoding.default_external).freeze
    io = StringIO.new(data)
    $stdin = io
    Object.send(:remove_const, :STDIN)
    Object.const_set(:STDIN, io)
    ARGV.replace(req["argv"] || [])
    nil
  end
  private_class_method :__input
end
