# frozen_string_literal: true

module Glovebox
  # Where the glovebox binary and the Ruby image it runs come from.
  #
  # A platform gem (x86_64-linux, aarch64-linux) packs both under
  # lib/glovebox/native/ at build time (`make gem`), so nothing is fetched
  # or compiled at install or run time. The plain gem packs neither and
  # finds a binary the way nokogiri-style gems fall back: $GLOVEBOX_BIN,
  # then a `glovebox` on PATH.
  module Native
    # The directory a platform gem packs the binary and the image into.
    DIR = File.expand_path("native", __dir__)
    # The packed binary's file name under DIR.
    BINARY = "glovebox"
    # The packed Ruby image's file name under DIR (the npm package
    # @ruby/4.0-wasm-wasi's dist/ruby+stdlib.wasm, pinned by the binary).
    IMAGE = "ruby+stdlib.wasm"

    # Raised when no glovebox binary can be found; the message says where
    # it looked and how to get one.
    class NotFound < ConfigError; end

    module_function

    # The path of the glovebox binary to start: $GLOVEBOX_BIN when set
    # (it must name an executable file), else the one this gem packs,
    # else the first executable `glovebox` on PATH that is not a Ruby
    # script starting this gem's own `glovebox` command (RubyGems' and
    # Bundler's binstubs, exe/glovebox: running one would run this search
    # again). Raises NotFound.
    def binary
      if (env = ENV["GLOVEBOX_BIN"]) && !env.empty?
        return env if executable?(env)

        raise NotFound, "GLOVEBOX_BIN=#{env} is not an executable file"
      end
      packed = File.join(DIR, BINARY)
      return packed if executable?(packed)

      ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).each do |d|
        next if d.empty?

        p = File.join(d, BINARY)
        return p if executable?(p) && !ruby_stub?(p)
      end
      raise NotFound, "no glovebox binary: this gem has none packed for #{RUBY_PLATFORM} and none is on PATH; " \
                      "install a platform gem (x86_64-linux, aarch64-linux), set GLOVEBOX_BIN, or put " \
                      "`glovebox` on PATH (go install github.com/gloveboxhq/glovebox/cmd/glovebox@latest)"
    end

    # The Ruby image to hand the binary (as GLOVEBOX_IMAGE): $GLOVEBOX_IMAGE
    # when set, else the image this gem packs, else nil (the binary then
    # fetches its pinned image with npm on first use).
    def image
      env = ENV["GLOVEBOX_IMAGE"]
      return env if env && !env.empty?

      packed = File.join(DIR, IMAGE)
      File.file?(packed) ? packed : nil
    end

    # The image to name in GLOVEBOX_IMAGE for the binary bin, or nil:
    # $GLOVEBOX_IMAGE when set (the user's choice); else the image this
    # gem packs, when bin (its real path, links resolved, as the binary
    # sees itself) is not beside it (a binary found elsewhere needs no
    # npm then); else nil. The packed binary finds the packed
    # image beside itself and checks its SHA-256 against the one it pins
    # (a tampered or damaged file is refused, naming both hashes), which
    # it never does for an image named in GLOVEBOX_IMAGE.
    def image_for(bin)
      img = image
      return img if img.nil? || img == ENV["GLOVEBOX_IMAGE"]

      File.dirname(real(img)) == File.dirname(real(bin)) ? nil : img
    end

    def real(path)
      File.realpath(path)
    rescue SystemCallError
      File.expand_path(path)
    end

    # True when this gem packs a binary (a platform gem).
    def packed? = executable?(File.join(DIR, BINARY))

    def executable?(path) = File.file?(path) && File.executable?(path)

    # A script (not a binary) that runs a gem's executable: RubyGems and
    # Bundler binstubs name Gem.activate_bin_path / Gem.bin_path / load
    # Gem.bin_path, and exe/glovebox names Glovebox::Native.
    def ruby_stub?(path)
      head = File.open(path, "rb") { |f| f.read(4096) }.to_s
      head.start_with?("#!") && head.match?(/Gem\.(activate_bin_path|bin_path)|Glovebox::Native/)
    rescue SystemCallError
      false
    end
    private_class_method :executable?, :ruby_stub?, :real
  end
end
