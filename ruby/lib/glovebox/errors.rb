# frozen_string_literal: true

module Glovebox
  # Base class of every error the gem raises.
  class Error < StandardError; end

  # The executor, or the embedded child, refused a request: +code+ is
  # the wire error code (EXECUTOR.md, "Error codes": "unauthenticated",
  # "request_too_large", "bad_request", "key_conflict", "queue_full",
  # "evals_disabled", ...; docs/embedded.md for the child's),
  # +http_status+ the HTTP status (Integer; nil from the child). Nothing
  # was started, except for "key_conflict" (the existing record is
  # untouched) and "backend_error" (a run's sandbox failed to start).
  class APIError < Error
    attr_reader :code, :http_status, :retry_after

    # from: who refused, the message's prefix.
    def initialize(code, message, http_status: nil, retry_after: nil, from: "glovebox executor")
      @code = code
      @http_status = http_status
      @retry_after = retry_after
      super("#{from}: #{code}: #{message}")
    end
  end

  # The executor could not be reached (connection refused, DNS, TLS):
  # nothing was sent, so nothing ran. Safe to retry as a new request.
  class ConnectionError < Error; end

  # The connection broke after the request was sent: the run or eval may
  # have happened. +key+ is its idempotency key; retry with the same key
  # (Box#retry, Sandbox#retry, or run(..., key: err.key)) to attach to it
  # or learn its recorded outcome. The gem never retries by itself.
  class InDoubtError < Error
    attr_reader :key

    def initialize(key, cause_message)
      @key = key
      super("glovebox executor: the connection broke after the request was sent (key #{key}); " \
            "it may have run: retry with the same key to learn its outcome (#{cause_message})")
    end

    # Always true: see the class comment.
    def in_doubt? = true
  end

  # A run or eval ended without running to completion, definitely:
  # +state+ is "failed", "lost" or "expired" and +code+ the record's
  # error code ("lost": the executor stopped while it ran; it is never run
  # again under this key; "backend_error", "canceled", "run_expired",
  # "not_found" for a session that is gone, ...).
  class RunError < Error
    attr_reader :key, :state, :code, :record

    def initialize(record)
      @record = record
      @key = record["key"]
      @state = record["state"]
      err = record["error"] || {}
      @code = err["code"]
      super("glovebox: #{@key} ended #{@state} (#{@code}): #{err["message"]}")
    end

    # True for state "lost": it was started and may have partly run.
    def lost? = @state == "lost"
  end

  # A continuation (Sandbox#continue) of an eval that was continued
  # already (by this or any process of the fleet): each pause is answered
  # once. +code+ is "already_continued"; the first continuation's Result
  # is under its own key.
  class AlreadyContinued < RunError; end

  # A value cannot cross the boundary (EXECUTOR.md, glovebox's value
  # format): an object with no data form, a Hash key that is not a
  # String, Symbol or Integer, or nesting deeper than 64 levels.
  class ValueError < Error; end

  # Raise it (or a subclass) in a tool method to choose the exception
  # class the guest sees: a subclass named NotFound raises
  # Glovebox::NotFound (a Glovebox::ToolError) in the guest, so guest code
  # can rescue that kind of failure alone.
  class ToolError < Error
    # The class name the guest sees: the last part of this class's name.
    def guest_class
      n = self.class.name.to_s.split("::").last
      n&.match?(/\A[A-Z][A-Za-z0-9_]{0,63}\z/) ? n : "ToolError"
    end
  end

  # Raised by Sandbox#expose for a name in only:/except: that is not an
  # exposable public method, and by Sandbox.new for bad options.
  class ConfigError < Error; end
end
