# frozen_string_literal: true

require "securerandom"

module Glovebox
  # Fresh random keys, as the executor makes them.
  module Keys
    module_function

    # A fresh random key with the given prefix ("r-" or "e-" and 32 hex
    # digits).
    def fresh(prefix) = "#{prefix}#{SecureRandom.hex(16)}"
  end
end
