# frozen_string_literal: true

module Glovebox
  # Raised by Glovebox.setup when `glovebox setup` fails; the message ends
  # with the last lines it printed.
  class SetupError < Error; end

  # Prepares everything an eval will need, ahead of time, so that no eval
  # waits: runs `glovebox setup` with the binary Glovebox::Native finds
  # (a platform gem's packed one, $GLOVEBOX_BIN, or PATH), which makes
  # the Ruby image ready twice, plain and fuel-metered, and boots each to
  # build its snapshot, in the glovebox cache ($GLOVEBOX_CACHE_DIR, else
  # ~/.cache/glovebox). A platform gem ships both images compiled, so
  # that takes seconds; a binary built from source compiles them first
  # (one to a few minutes on 2 cores). Later runs take well under a
  # second. Call it from bin/setup, a deploy step or a Dockerfile (as the
  # user the app runs as: the cache is per user), or run `glovebox setup`
  # / `rake glovebox:setup`.
  #
  # +mounts+ (a Sandbox's mounts: option, [{ host:, guest:, writable: }])
  # also prepares the snapshots for that mount layout: a sandbox with
  # mounts starts from a snapshot booted with its guest paths, in order
  # (host paths and access do not matter), built on the first eval that
  # uses the layout otherwise (seconds). Call setup once per layout; the
  # host directories must exist.
  #
  # Progress lines go to +log+: Glovebox.logger (at info) when that is
  # set, else $stderr. A binary found elsewhere than in this gem is given
  # the gem's packed Ruby image, if any, so that it needs no npm.
  #
  # Returns the line `glovebox setup` ends with ("glovebox is ready
  # (ruby 4.0.0 ...) in 61.2s; cache: ..."). Raises Native::NotFound when
  # there is no binary and SetupError when setup fails.
  def self.setup(log: nil, mounts: nil)
    log ||= config.logger_set? ? logger : $stderr
    args = setup_mount_args(mounts)
    bin = Native.binary
    env = {}
    img = Native.image_for(bin)
    env["GLOVEBOX_IMAGE"] = img if img
    tail = []
    ready = nil
    IO.popen(env, [bin, "setup", *args], err: %i[child out]) do |io|
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

  # `glovebox setup`'s --mount arguments for mounts (see setup). Raises
  # ArgumentError for a mount without host: or guest:.
  def self.setup_mount_args(mounts)
    Array(mounts).flat_map do |m|
      m = m.to_h.transform_keys(&:to_sym)
      host, guest = m[:host], m[:guest]
      raise ArgumentError, "Glovebox.setup mounts: each needs host: and guest: (got #{m.inspect})" if host.to_s.empty? || guest.to_s.empty?

      ["--mount", "#{File.expand_path(host.to_s)}:#{guest}#{":rw" if m[:writable]}"]
    end
  end
  private_class_method :setup_mount_args
end
