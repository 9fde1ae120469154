# frozen_string_literal: true

require "json"

module Glovebox
  # glovebox's value format (EXECUTOR.md; glovebox's package doc,
  # "Values"): JSON plus the tokens NaN, Infinity and -Infinity; integers
  # exact at any size; bytes as {"$base64" => "<standard base64>"}.
  #
  # Ruby to the wire: nil, true, false, Integer, Float, String (UTF-8; a
  # binary String or one not valid UTF-8 crosses as bytes), Symbol (as
  # its name: symbols do not survive the boundary), Array, Hash (String,
  # Symbol or Integer keys, as strings), Struct (as its to_h). Anything
  # else raises Glovebox::ValueError naming the class.
  #
  # The wire to Ruby: the same, with bytes as binary (ASCII-8BIT) Strings
  # and Hash keys as Strings.
  module Value
    BINARY_KEY = "$base64"
    MAX_DEPTH = 64
    # The deepest JSON #load reads: twice glovebox's own bound on what it
    # encodes (wire.MaxDepth, 128 levels). Deeper text did not come from
    # glovebox; Ruby's parser would recurse on the C stack for it (a
    # million levels spin for minutes before SystemStackError).
    MAX_LOAD_DEPTH = 256

    module_function

    # Encodes a Ruby value as the wire's JSON text.
    def dump(v)
      JSON.generate(to_wire(v, 0), allow_nan: true, max_nesting: false)
    end

    # Decodes the wire's JSON text into Ruby data. Raises
    # JSON::ParserError for text that is not JSON, or nests deeper than
    # MAX_LOAD_DEPTH.
    def load(text)
      from_wire(JSON.parse(text, allow_nan: true, max_nesting: MAX_LOAD_DEPTH))
    end

    # Ruby data to JSON-ready data.
    def to_wire(v, depth)
      raise ValueError, "the value is nested deeper than #{MAX_DEPTH} levels" if depth > MAX_DEPTH

      case v
      when nil, true, false, Integer then v
      when Float then v
      when Symbol then v.name
      when String then string_to_wire(v)
      when Array then v.map { |x| to_wire(x, depth + 1) }
      when Hash
        v.each_with_object({}) do |(k, x), h|
          key = case k
                when String then k.encoding == Encoding::UTF_8 ? k : k.encode(Encoding::UTF_8)
                when Symbol then k.name
                when Integer then k.to_s
                else raise ValueError, "a Hash key of class #{k.class} cannot cross to the sandbox (use a String, Symbol or Integer)"
                end
          h[key] = to_wire(x, depth + 1)
        end
      when Struct then to_wire(v.to_h, depth)
      else
        raise ValueError, "a #{v.class} has no data form in the sandbox (send nil, true, false, numbers, " \
                          "Strings, Symbols, Arrays, Hashes or Structs)"
      end
    end

    def string_to_wire(s)
      if s.encoding == Encoding::BINARY
        return s.dup.force_encoding(Encoding::UTF_8) if s.ascii_only?

        return { BINARY_KEY => [s].pack("m0") }
      end
      u = s.encoding == Encoding::UTF_8 ? s : s.encode(Encoding::UTF_8)
      u.valid_encoding? ? u : { BINARY_KEY => [s.b].pack("m0") }
    rescue EncodingError
      { BINARY_KEY => [s.b].pack("m0") }
    end

    def from_wire(v)
      case v
      when Array then v.map { |x| from_wire(x) }
      when Hash
        if v.size == 1 && v[BINARY_KEY].is_a?(String)
          begin
            return v[BINARY_KEY].unpack1("m0")
          rescue ArgumentError
            return v
          end
        end
        v.transform_values { |x| from_wire(x) }
      else v
      end
    end
  end
end
