# frozen_string_literal: true

module Glovebox
  # An eval's status (Result#status): a frozen String ("ok", "error",
  # "timeout", "fuel_exhausted", "memory_limit", "canceled",
  # "tool_budget_exceeded", "sandbox_error", "suspended") that also
  # equals its Symbol, so glovebox's spelling and security_box's both
  # hold:
  #
  #   r.status == "ok"      #=> true
  #   r.status == :ok       #=> true
  #   r.status.ok?          #=> true   (one predicate per status)
  #   r.status.to_sym       #=> :ok
  #
  # Comparisons that start from the other side use the other class's
  # rules: `:ok == r.status` and `case r.status when :ok` are false (a
  # Symbol equals only itself); compare with the status on the left,
  # use the predicates, or `case r.status.to_sym`.
  class Status < String
    # Every status glovebox reports, with what it means (the same
    # taxonomy as glovebox.Status in Go).
    ALL = {
      "ok" => "the code ran to its end; value is its last expression",
      "error" => "the guest raised (error has its class, message and backtrace)",
      "timeout" => "the wall-clock limit ran out",
      "fuel_exhausted" => "the fuel budget (a deterministic CPU bound) ran out",
      "memory_limit" => "the guest asked for more memory than its limit",
      "canceled" => "the eval was canceled (Sandbox#cancel, the app going away)",
      "tool_budget_exceeded" => "the eval made more tool calls, or spent more time in tools, than its budget",
      "sandbox_error" => "the sandbox itself failed (a mount's host directory missing, ...)",
      "suspended" => "the eval paused at a suspend: tool (Result#pending)",
    }.freeze

    # The Status for s (a String or Symbol); one frozen instance per
    # status. A status this gem does not know (a newer executor's) is
    # still a Status.
    def self.[](s)
      s = s.to_s
      (@cache ||= {})[s] ||= new(s).freeze
    end

    def ==(other)
      other.is_a?(Symbol) ? to_sym == other : super
    end

    ALL.each_key { |name| define_method(:"#{name}?") { self == name } }

    # A guest exception or any limit: everything but "ok" and
    # "suspended".
    def failure? = !ok? && !suspended?

    # What the status means (ALL), or nil for one this gem does not know.
    def meaning = ALL[to_s]
  end
end
