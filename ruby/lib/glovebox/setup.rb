# frozen_string_literal: true

module Glovebox
  # Raised by Glovebox.setup when `glovebox setup` fails; the message ends
  # with the last lines it printed.
  class SetupError < Error; end

  # Prepares everything an eval will need, ahead of time, so that no eval
  # waits: runs `glovebox setup` with the binary Glovebox::Native finds
  # (a platform gem's packed one, $GLOVEBOX_BIN, or PATH), which compiles
  # the Ruby image twice, plain and fuel-metered, and boots each to build
  # its snapshot, in the glovebox cache ($GLOVEBOX_CACHE_DIR, else
  # ~/.cache/glovebox). On a machine's first run that takes one to a few
  # minutes on 2 cores; later runs take well under a second. Call it from
  # bin/setup, a deploy step or a Dockerfile (as the user the app runs as:
  # the cache is per user), or run `glovebox setup` / `rake glovebox:setup`.
  #
  # Progress lines go to +log+: Glovebox.logger (at info) when that is
  # set, else $stderr. A binary found elsewhere than in this gem is given
  # the gem's packed Ruby image, if any, so that it needs no npm.
  #
  # Returns the line `glovebox setup` ends with ("glovebox is ready
  # (ruby 4.0.0 ...) in 61.2s; cache: ..."). Raises Native::NotFound when
  # there is no binary and SetupError when setup fails.
  def self.setup(log: nil)
    log ||= config.logger_set? ? logger : $stderr
    bin = Native.binary
    env = {}
    img = Native.image_for(bin)
    env["GLOVEBOX_IMAGE"] = img if img
    tail = []
    ready = nil
    IO.popen(env, [bin, "setup"], err: %i[child out]) do |io|
      io.each_line do |line|
        line = line.chomp
        ready = line if line.start_with?("glovebox is ready")
        tail = (tail << line).last(20)
        log.respond_to?(:info) ? log.info(line) : log.puts(line)
      end
    end
    st = $?
    raise SetupError, "glovebox setup (#{bin}) failed (#{st}):\n#{tail.join("\n")}" unless st.success? && ready

    ready
  end
end
