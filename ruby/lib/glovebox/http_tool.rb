# frozen_string_literal: true

module Glovebox
  # HTTP for guest code, with glovebox's SSRF rules (Go's httptool, run in
  # the embedded child; docs/http.md): Enclave's HttpTool, in its
  # spelling.
  #
  #   http = Glovebox::HttpTool.new(allow: %w[api.example.com *.githubusercontent.com])
  #   sandbox = Glovebox::Sandbox.new(tools: MyTools.new)
  #   sandbox.expose(http)                   # or Sandbox.new(http: http)
  #   sandbox.eval('get("https://api.example.com/status")["status"]').value  #=> 200
  #
  # The guest gets request(method, url, headers = {}, body = nil) and
  # get/head/delete(url, headers = {}), post/put/patch(url, body = nil,
  # headers = {}) (headers: and body: as keywords too). Each returns a
  # Hash: "status" (Integer), "headers" (lower-case names), "body" (the
  # parsed JSON for a JSON response, else a String, or base64 text for
  # bytes) and "body_encoding" ("json", "text", "base64").
  #
  # Each request is checked, in order: the tool's lifetime budgets
  # (max_requests:, total_time_budget:), the URL (http/https only, no
  # userinfo, no IP-literal host in any spelling unless
  # allow_ip_literals:, only allowed_ports:, no control characters), the
  # host allowlist (label-suffix matching: *.example.com matches
  # a.example.com, never example.com.evil.com), the headers (Host,
  # Content-Length, Transfer-Encoding, Connection refused; names and
  # values checked), then the address floor: every address the name
  # resolves to must be public (loopback, private, link-local, CGNAT,
  # metadata endpoints such as 169.254.169.254, the host's own addresses
  # and IPv4-in-IPv6 forms are refused), and the connection goes only to
  # an address that was checked, checked again as it connects (no DNS
  # rebinding). Responses are capped while they stream
  # (max_response_bytes:, headers too), redirects come back to the guest
  # and are never followed, environment proxies are ignored. A refusal
  # raises a Glovebox::HTTP...Error in the guest (HTTPHostError,
  # HTTPBlockedAddressError, HTTPURLError, HTTPBudgetError, ...: all
  # Glovebox::ToolError).
  #
  # The requests are made by the glovebox child, not by this process: the
  # tool is bound there when made (starting the child), and its budgets
  # live there, spanning every sandbox that exposes it until
  # reset_budget! (a child started anew, in a forked process or after a
  # crash, starts them afresh). Embedded only: through an executor, the
  # network is the operator's (an eval profile's http section, profile:).
  class HttpTool < HostTools
    # A request the guest attempted, as on_request: sees it: +method+,
    # +url+ (as the guest gave it), +host+ (canonical; nil when the URL
    # was refused first), +address+ ("ip:port" connected to, or nil),
    # +status+ (Integer, nil without a response), +bytes+ (body bytes
    # read), +duration+ (seconds), +error+ (the refusal or failure, nil
    # for a response of any status) and +error_class+ (the guest's class:
    # "HTTPBlockedAddressError", ...).
    Request = Struct.new(:method, :url, :host, :address, :status, :bytes, :duration, :error, :error_class,
                         keyword_init: true) do
      # True when the request got a response (whatever its status).
      def ok? = error.nil?
    end

    attr_reader :on_request

    # allow: host patterns (Array of String: "api.example.com",
    # "*.example.com"), or :any (Enclave's allow: :any, or ["ANY"]) for
    # every host the address floor permits. max_requests: requests over
    # the tool's life (Integer; default 100), total_time_budget: seconds
    # of requests over its life (default 60), request_timeout: seconds per
    # request (default 10), max_response_bytes: body bytes per response
    # (default 256 KiB), max_response_header: header bytes (default 64
    # KiB), allowed_ports: (default [80, 443]), allow_ip_literals: URLs may
    # name hosts by IP address (default false), trust: CIDR prefixes exempt
    # from the address floor (["10.1.0.0/16"], for an internal service;
    # metadata addresses stay refused unless named exactly), on_request:
    # ->(request) { } called here after each request the guest attempts
    # (a Request; its failure is ignored), prefix: what the functions'
    # names start with ("" by default; "http_" gives http_get, ...: the
    # CLI's names).
    #
    # Raises ConfigError, naming the option, for a bad value (a wildcard
    # anywhere but a whole first label, an IP address in allow: without
    # allow_ip_literals:, a port outside 1-65535, a budget that is not a
    # positive number, an on_request that is not callable). Embedded, the
    # tool is bound in the child now (the child starts if need be).
    def initialize(allow: nil, max_requests: nil, total_time_budget: nil, request_timeout: nil, max_response_bytes: nil,
                   max_response_header: nil, allowed_ports: nil, allow_ip_literals: false, trust: nil, on_request: nil,
                   prefix: "")
      spec = { "id" => Keys.fresh("t-") }
      any = [:any, "ANY", ["ANY"], [:any]].include?(allow)
      if any
        spec["any_host"] = true
      else
        list = allow.is_a?(String) ? [allow] : allow
        unless list.is_a?(Array) && !list.empty? && list.all? { _1.is_a?(String) && !_1.empty? }
          raise ConfigError, "allow: give host patterns (%w[api.example.com *.example.com]) or :any, not #{allow.inspect}"
        end
        spec["allow"] = list
      end
      spec["max_requests"] = HttpTool.positive_int(max_requests, "max_requests") if max_requests
      spec["max_time_ms"] = HttpTool.millis(total_time_budget, "total_time_budget") if total_time_budget
      spec["request_timeout_ms"] = HttpTool.millis(request_timeout, "request_timeout") if request_timeout
      spec["max_response_bytes"] = HttpTool.positive_int(max_response_bytes, "max_response_bytes") if max_response_bytes
      spec["max_response_header"] = HttpTool.positive_int(max_response_header, "max_response_header") if max_response_header
      if allowed_ports
        ports = Array(allowed_ports)
        unless !ports.empty? && ports.all? { _1.is_a?(Integer) && _1.between?(1, 65_535) }
          raise ConfigError, "allowed_ports: give port numbers from 1 to 65535, not #{allowed_ports.inspect}"
        end
        spec["ports"] = ports
      end
      spec["allow_ip_literals"] = true if allow_ip_literals
      spec["trust"] = Array(trust).map(&:to_s) if trust
      raise ConfigError, "prefix: give a String (\"\" or \"http_\")" unless prefix.is_a?(String)

      spec["prefix"] = prefix unless prefix.empty?
      if on_request && !on_request.respond_to?(:call)
        raise ConfigError, "on_request: #{on_request.class} does not respond to call; give ->(request) { ... }"
      end

      @on_request = on_request
      @prefix = prefix
      super({ "http" => spec }, "Glovebox::HttpTool")
      @names = %w[request get head delete post put patch].map { "#{prefix}#{_1}" }
      bind! if Glovebox.config.executor.to_s.empty?
    end

    # Starts the lifetime budgets (max_requests:, total_time_budget:)
    # afresh, for the next unit of work; never reachable from the guest.
    # Returns self.
    def reset_budget!
      child, ans = @mutex.synchronize { @bound }
      child.request({ "op" => "http_reset", "handle" => ans["handle"] }) if child && Child.running.equal?(child)
      self
    rescue APIError => e
      raise unless e.code == "unknown_handle"

      self
    end

    def inspect = "#<#{self.class.name} #{(@spec["http"]["allow"] || ["any host"]).join(", ")}>"

    # @private Reports the call's requests to on_request.
    def observe(answer)
      return unless @on_request

      Array(answer["requests"]).each do |r|
        @on_request.call(Request.new(method: r["method"], url: r["url"], host: r["host"], address: r["address"],
                                     status: r["status"], bytes: r["body_bytes"].to_i, duration: r["duration_ms"].to_f / 1000,
                                     error: r["error"], error_class: r["class"]))
      rescue StandardError
        nil # an observer's failure does not change the request
      end
    end

    # httptool.Config's fields, as HttpTool.new names them.
    OPTION_NAMES = { "AllowHosts" => "allow:", "AnyHost" => "allow: :any", "AllowIPLiterals" => "allow_ip_literals:",
                     "Ports" => "allowed_ports:", "TrustedPrefixes" => "trust:", "MaxRequests" => "max_requests:",
                     "MaxTime" => "total_time_budget:", "RequestTimeout" => "request_timeout:",
                     "MaxResponseBody" => "max_response_bytes:", "MaxResponseHeader" => "max_response_header:" }.freeze

    # @private httptool's refusal, naming this class's options.
    def translate(message)
      m = message.sub(/\Ahttptool: invalid config: /, "").gsub(/ \(httptool\.Config\.\w+, glovebox flag [^)]*\)/, "")
      m = m.gsub(/\b(#{OPTION_NAMES.keys.join("|")}):/) { "#{OPTION_NAMES[$1].chomp(":")}:" }
      m.gsub(/\b(#{OPTION_NAMES.keys.join("|")})\b/) { OPTION_NAMES[$1] }
    end

    # @private
    def self.positive_int(v, what)
      raise ConfigError, "#{what}: #{v.inspect} is not a positive Integer" unless v.is_a?(Integer) && v.positive?

      v
    end

    # @private Seconds as milliseconds.
    def self.millis(v, what)
      raise ConfigError, "#{what}: #{v.inspect} is not a positive number of seconds" unless v.is_a?(Numeric) && v.positive? && v.to_f.finite?

      (v * 1000).ceil
    end
  end
end
