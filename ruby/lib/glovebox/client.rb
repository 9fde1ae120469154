# frozen_string_literal: true

require "digest"
require "json"
require "net/http"
require "openssl"
require "uri"

module Glovebox
  # A connection to one `glovebox executor` (EXECUTOR.md): HTTPS with a
  # bearer token. Sandbox and Box make one from executor:/token:/ca_file:,
  # or take one as client:. A Client holds two keep-alive connections
  # (one for event streams, one for tool answers) and must be used by one
  # thread at a time: give each thread (each Puma worker thread, each
  # job) its own.
  class Client
    attr_reader :url

    # url: "https://127.0.0.1:8443". token: the tenant's bearer token
    # ("gbx_..."; surrounding whitespace, such as the newline of a token
    # read from a file, is dropped). ca_file: a PEM file of the roots to
    # trust (the executor's devcert for a local one); nil uses the
    # system's roots. open_timeout: seconds to connect. Raises
    # ConfigError for a URL that is not https, an empty token or one
    # with whitespace or control characters inside it (the message does
    # not show the token), and a ca_file that is missing, unreadable or
    # holds no PEM certificate (naming the file).
    def initialize(url:, token:, ca_file: nil, open_timeout: 10)
      @url = URI(url)
      raise ConfigError, "the executor URL must be https:// (got #{url})" unless @url.scheme == "https"

      @token = Client.check_token(token)
      @ca_file = ca_file && Client.check_ca_file(ca_file)
      @open_timeout = open_timeout
      @conns = {}
    end

    # A line for consoles and logs: the executor's URL, never the token.
    def inspect = "#<#{self.class} #{Client.safe_url(@url)}>"

    # @private url (a URI or String) without userinfo, for messages.
    def self.safe_url(url)
      u = URI(url.to_s)
      u.userinfo = nil if u.respond_to?(:userinfo=) && u.userinfo
      u.to_s
    rescue URI::Error
      "(an executor)"
    end

    # @private Who this client is to the executor (its URL and a digest
    # of its token), for what is checked once per process.
    def identity = @identity ||= [@url.to_s, Digest::SHA256.hexdigest(@token)]

    # Closes the keep-alive connections.
    def close
      @conns.each_value { |h| h.finish if h.started? }
      @conns.clear
    end

    # GET /v1/info: {"version", "backend", "isolation", "tenant"}.
    # Raises APIError ("unauthenticated" for a bad token).
    def info = request(:get, "/v1/info")

    # One JSON request; returns the decoded answer (nil for 204). Raises
    # APIError for a refusal, ConnectionError when nothing was sent.
    def request(method, path, body = nil, conn: :call)
      req = build(method, path, body)
      res = begin
        http(conn).request(req)
      rescue *NET_ERRORS => e
        reset(conn)
        raise ConnectionError, "glovebox executor at #{@url}: #{e.class}: #{e.message}"
      end
      check(res)
      res.body.to_s.empty? ? nil : JSON.parse(res.body)
    end

    # POSTs body to path and yields each NDJSON event (a Hash) as it
    # arrives, but for an "error" event (the stream's last), which raises
    # APIError with its code and message. Raises ConnectionError when the
    # connection could not be made, InDoubtError(key) when it broke after
    # the request was sent.
    def stream(path, body, key)
      h = begin
        http(:stream)
      rescue *NET_ERRORS => e
        reset(:stream)
        raise ConnectionError, "glovebox executor at #{@url}: #{e.class}: #{e.message}"
      end
      req = build(:post, path, body)
      got_end = false
      begin
        h.request(req) do |res|
          check(res)
          buf = +""
          res.read_body do |chunk|
            buf << chunk
            while (i = buf.index("\n"))
              line = buf.slice!(0, i + 1)
              next if line.strip.empty?

              ev = JSON.parse(line)
              got_end = true if %w[result error].include?(ev["type"])
              if ev["type"] == "error"
                e = ev["error"] || {}
                raise APIError.new(e["code"], e["message"])
              end

              yield ev
            end
          end
        end
      rescue *NET_ERRORS, JSON::ParserError => e
        reset(:stream)
        raise InDoubtError.new(key, "#{e.class}: #{e.message}")
      end
      raise InDoubtError.new(key, "the event stream ended without a result") unless got_end
    end

    # token as a bearer token: a String without surrounding whitespace;
    # raises ConfigError without showing it.
    def self.check_token(token)
      raise ConfigError, "token is empty: pass the tenant's bearer token" if token.nil?
      raise ConfigError, "token: pass the tenant's bearer token as a String, not #{token.class}" unless token.is_a?(String)

      t = token.strip
      raise ConfigError, "token is empty: pass the tenant's bearer token" if t.empty?
      if t.match?(/[[:space:]]|[[:cntrl:]]/)
        raise ConfigError, "token: the bearer token has whitespace or control characters inside it " \
                           "(#{t.bytesize} bytes); pass one token, as `glovebox executor token` printed it"
      end

      t
    end

    # path as a CA file: an existing, readable PEM file holding at least
    # one certificate; raises ConfigError naming the file.
    def self.check_ca_file(path)
      p = path.to_s
      raise ConfigError, "ca_file #{p}: no such file" unless File.exist?(p)
      raise ConfigError, "ca_file #{p}: not a file" unless File.file?(p)
      raise ConfigError, "ca_file #{p}: not readable by this process" unless File.readable?(p)

      certs = begin
        OpenSSL::X509::Certificate.load_file(p)
      rescue OpenSSL::X509::CertificateError, SystemCallError => e
        raise ConfigError, "ca_file #{p}: not a PEM file of certificates (#{e.message})"
      end
      raise ConfigError, "ca_file #{p}: holds no PEM certificate" if certs.empty?

      p
    end

    NET_ERRORS = [IOError, EOFError, SystemCallError, SocketError, OpenSSL::SSL::SSLError,
                  Net::OpenTimeout, Net::ReadTimeout, Net::WriteTimeout, Net::HTTPBadResponse].freeze

    private

    def build(method, path, body)
      klass = { get: Net::HTTP::Get, post: Net::HTTP::Post, delete: Net::HTTP::Delete }.fetch(method)
      req = klass.new(path)
      req["Authorization"] = "Bearer #{@token}"
      req["User-Agent"] = "glovebox-ruby/#{VERSION}"
      if body
        req["Content-Type"] = "application/json"
        req.body = body.is_a?(String) ? body : JSON.generate(body)
        # A large body waits for the executor's go-ahead: one over the
        # tenant's max_request_bytes is refused (413, request_too_large)
        # before it is sent, where otherwise the connection would close
        # under the write and leave the request in doubt.
        req["Expect"] = "100-continue" if req.body.bytesize > EXPECT_ABOVE
      end
      req
    end

    # Bodies over this many bytes are sent with Expect: 100-continue.
    EXPECT_ABOVE = 64 << 10

    # Seconds a body sent with Expect: 100-continue waits for the go-ahead
    # before it is sent anyway (a proxy may not pass the 100 on).
    CONTINUE_TIMEOUT = 5

    def check(res)
      return if res.is_a?(Net::HTTPSuccess)

      err = begin
        JSON.parse(res.body.to_s)["error"]
      rescue JSON::ParserError, NoMethodError, TypeError
        nil
      end
      if err.is_a?(Hash)
        raise APIError.new(err["code"], err["message"], http_status: res.code.to_i, retry_after: res["Retry-After"]&.to_i)
      end

      raise APIError.new("bad_response", "HTTP #{res.code} without the executor's error body " \
                                         "(a proxy in between?): #{res.body.to_s[0, 200]}", http_status: res.code.to_i)
    end

    def http(name)
      h = @conns[name]
      return h if h&.started?

      h = Net::HTTP.new(@url.host, @url.port)
      h.use_ssl = true
      h.min_version = OpenSSL::SSL::TLS1_2_VERSION
      h.verify_mode = OpenSSL::SSL::VERIFY_PEER
      h.ca_file = @ca_file if @ca_file
      h.open_timeout = @open_timeout
      h.continue_timeout = CONTINUE_TIMEOUT
      h.read_timeout = 3600
      h.keep_alive_timeout = 30
      h.start
      @conns[name] = h
    end

    def reset(name)
      h = @conns.delete(name)
      h&.finish if h&.started?
    rescue IOError
      nil
    end

    # Glovebox::Keys, by its earlier name.
    Keys = Glovebox::Keys
  end
end
