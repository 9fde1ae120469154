# frozen_string_literal: true

# Enclave's HTTP tool on glovebox: require "glovebox/enclave/http_tool"
# where Enclave's code requires "enclave/http_tool".
require "glovebox/enclave"

unless defined?(Glovebox::HttpTool)
  raise LoadError, "glovebox/enclave/http_tool needs Glovebox::HttpTool (the HTTP tool run in the embedded child), " \
                   "which this glovebox gem does not have"
end

class Enclave
  # Glovebox::HttpTool under Enclave's name, with Enclave's options
  # (allow:, max_requests:, request_timeout:, total_time_budget:,
  # max_response_bytes:, allowed_ports:, on_request:) and reset_budget!:
  #
  #   http = Enclave::HttpTool.new(allow: %w[api.example.com *.githubusercontent.com])
  #   enclave.expose(http)   # the code gets request, get, post, put, patch, delete, head
  #
  # The requests are made by the glovebox child with Go's httptool rules
  # (docs/http.md). A refused request raises a Glovebox::HTTP...Error in
  # the code (HTTPHostError, HTTPBlockedAddressError, HTTPURLError,
  # HTTPBudgetError, ...: each a Glovebox::ToolError) where Enclave raises
  # DeniedError; nothing is raised in your process.
  class HttpTool < Glovebox::HttpTool
    # Enclave's name for a denied request. glovebox denies in the child
    # and the code sees a Glovebox::HTTP...Error; this class exists so
    # code naming it loads, and is never raised.
    class DeniedError < Enclave::Error; end
  end
end
