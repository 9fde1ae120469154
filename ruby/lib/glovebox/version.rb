# frozen_string_literal: true

module Glovebox
  # The gem's version. glovebox itself is versioned by its Git tags; the
  # gem is released from the same tag with the same number.
  VERSION = "0.1.0"
  # The executor wire contract this gem speaks (EXECUTOR.md, "v1").
  WIRE_VERSION = "v1"
end
