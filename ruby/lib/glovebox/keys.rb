# frozen_string_literal: true

require "securerandom"

module Glovebox
  # Fresh random keys, as the executor makes them.
  module Keys
    module_function

    # A fresh random key with the given prefix ("r-" or "e-" and 32 hex
    # digits).
    def fresh(prefix) = "#{prefix}#{SecureRandom.hex(16)}"

    # A key unique within this process, for what no other process sees
    # (an embedded eval's Result#key): 16 random hex digits drawn once
    # per process, then a counter; no system call each time.
    def local(prefix)
      if @pid != Process.pid
        @pid = Process.pid
        @base = SecureRandom.hex(8)
        @n = 0
      end
      format("%s%s%016x", prefix, @base, @n += 1)
    end
  end
end
