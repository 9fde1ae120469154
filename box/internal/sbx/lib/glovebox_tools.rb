# Client for glovebox's tool socket: call the host's tools from a box.
#
#   require "glovebox_tools"
#   GloveboxTools.orders(42, status: "open")
#   GloveboxTools.call("orders", 42)
#
# A tool's error raises GloveboxTools::ToolError (#klass is the host's
# class name); a spent budget or deadline raises GloveboxTools::ToolAbort.
# The socket path is in GLOVEBOX_TOOLS. Wire format: frames of a decimal
# length, a newline and that many bytes; see glovebox's box package docs.
require "json"
require "socket"

module GloveboxTools
  class ToolError < StandardError
    attr_reader :klass
    def initialize(klass, message)
      super(message)
      @klass = klass
    end
  end

  class ToolAbort < StandardError
    attr_reader :status
    def initialize(status, message)
      super(message)
      @status = status
    end
  end

  @mutex = Mutex.new

  def self.roundtrip(body)
    @mutex.synchronize do
      @sock ||= begin
        path = ENV["GLOVEBOX_TOOLS"] or raise ToolError.new("ToolError", "no tool socket (GLOVEBOX_TOOLS is not set)")
        UNIXSocket.new(path)
      end
      body = body.b
      @sock.write("#{body.bytesize}\n", body)
      n = Integer(@sock.gets)
      @sock.read(n)
    end
  end

  def self.decode(reply)
    tag, rest = reply.split("\n", 2)
    case tag
    when "n" then nil
    when "t" then true
    when "f" then false
    when "s" then rest.force_encoding(Encoding::UTF_8)
    when "i" then Integer(rest)
    when "j" then JSON.parse(rest.force_encoding(Encoding::UTF_8), allow_nan: true)
    when "err"
      klass, msg = rest.split("\n", 2)
      raise ToolError.new(klass, msg.to_s.force_encoding(Encoding::UTF_8))
    when "abort"
      status, msg = rest.split("\n", 2)
      raise ToolAbort.new(status, msg.to_s.force_encoding(Encoding::UTF_8))
    else
      raise ToolError.new("ToolError", "malformed reply from the tool socket")
    end
  end

  def self.call(name, *args, **kwargs)
    body = +"call\n#{name}\n"
    body << JSON.generate([args, kwargs]) unless args.empty? && kwargs.empty?
    decode(roundtrip(body))
  end

  def self.tools
    decode(roundtrip("list"))
  end

  def self.method_missing(name, *args, **kwargs)
    call(name.to_s, *args, **kwargs)
  end

  def self.respond_to_missing?(_name, _priv = false) = true
end
