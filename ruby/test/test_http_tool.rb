# frozen_string_literal: true

require_relative "helper"
require_relative "local_http"

# Glovebox::HttpTool: Enclave's HTTP tool, run by the embedded child with
# Go's httptool (the real binary). The SSRF floor holds from Ruby: the
# guest cannot reach loopback, metadata or private addresses in any
# spelling; a test server on loopback is reached only when the tool
# trusts loopback (trust:, the documented setting an operator uses for an
# internal service).
class HttpToolTest < Minitest::Test
  def setup
    @web = LocalHTTP.new do |_conn, method, path, headers, body|
      case path
      when "/status" then [200, { "Content-Type" => "application/json" }, JSON.generate("status" => "up", "method" => method)]
      when "/text" then [200, { "Content-Type" => "text/plain" }, "plain words"]
      when "/redirect" then [302, { "Location" => "http://169.254.169.254/latest/meta-data/" }, ""]
      when "/big" then [200, { "Content-Type" => "text/plain" }, "x" * 50_000]
      when "/echo" then [200, { "Content-Type" => "application/json" }, JSON.generate("body" => body, "auth" => headers["authorization"])]
      else [404, {}, "no"]
      end
    end
    @seen = []
  end

  def teardown = @web.stop

  # A tool that may reach the test server: "localhost" allowed, loopback
  # trusted, its port allowed.
  def local_tool(**opts)
    Glovebox::HttpTool.new(allow: ["localhost"], trust: ["127.0.0.0/8"], allowed_ports: [@web.port],
                           on_request: ->(r) { @seen << r }, **opts)
  end

  def test_the_seed_example_shape
    http = local_tool
    sandbox = Glovebox::Sandbox.new
    sandbox.expose(http)
    assert_equal %i[delete get head patch post put request], sandbox.exposed_functions
    r = sandbox.eval(<<~RUBY)
      resp = get("http://localhost:#{@web.port}/status")
      [resp["status"], resp["body"], resp["body_encoding"], get("http://localhost:#{@web.port}/text")["body"]]
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal [200, { "status" => "up", "method" => "GET" }, "json", "plain words"], r.value
    assert_equal %w[get get], r.tool_calls.map(&:name)
    assert_equal 200, r.tool_calls.first.result["status"]
  end

  def test_verbs_bodies_and_headers
    sb = Glovebox::Sandbox.new(http: local_tool)
    u = "http://localhost:#{@web.port}/echo"
    r = sb.eval(<<~RUBY)
      [post("#{u}", { "a" => 1 })["body"]["body"], put("#{u}", "raw")["body"]["body"],
       request("PATCH", "#{u}", { "Authorization" => "Bearer mine" }, "p")["body"],
       head("#{u}")["status"], delete("#{u}", headers: { "X-Id" => "7" })["status"]]
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal ['{"a":1}', "raw", { "body" => "p", "auth" => "Bearer mine" }, 200, 200], r.value
    assert_equal %w[POST PUT PATCH HEAD DELETE], @web.seen.map(&:first)
  end

  # The address floor, from the guest: loopback by address and by name,
  # the metadata endpoint, an IPv4-mapped IPv6 loopback; each refused
  # with its class, and no connection made.
  def test_ssrf_addresses_refused_in_the_guest
    literal = Glovebox::HttpTool.new(allow: :any, allow_ip_literals: true, allowed_ports: [80, @web.port],
                                     on_request: ->(r) { @seen << r })
    sb = Glovebox::Sandbox.new(http: literal)
    r = sb.eval(<<~RUBY)
      def try = (yield; "reached") rescue $!.class.name
      [try { get("http://127.0.0.1:#{@web.port}/status") },
       try { get("http://169.254.169.254/latest/meta-data/") },
       try { get("http://localhost:#{@web.port}/status") },
       try { get("http://[::ffff:127.0.0.1]:#{@web.port}/status") },
       try { get("http://2130706433:#{@web.port}/status") },
       try { get("http://0x7f.1:#{@web.port}/status") }]
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal %w[Glovebox::HTTPBlockedAddressError Glovebox::HTTPBlockedAddressError Glovebox::HTTPBlockedAddressError
                    Glovebox::HTTPBlockedAddressError Glovebox::HTTPURLError Glovebox::HTTPURLError], r.value
    assert_empty @web.seen, "no request reached the server"
    assert_equal %w[HTTPBlockedAddressError HTTPBlockedAddressError HTTPBlockedAddressError HTTPBlockedAddressError HTTPURLError
                    HTTPURLError], @seen.map(&:error_class)
    assert_equal %w[error] * 6, r.tool_calls.map(&:outcome)
    # The metadata endpoint stays refused when its network is trusted.
    meta = Glovebox::HttpTool.new(allow: ["169.254.169.254"], allow_ip_literals: true, trust: ["169.254.0.0/16"])
    r = Glovebox::Sandbox.new(http: meta).eval('(get("http://169.254.169.254/"); "reached") rescue $!.class.name')
    assert_equal "Glovebox::HTTPBlockedAddressError", r.value
    # Without allow_ip_literals: an address in any spelling is refused as a URL.
    r = Glovebox::Sandbox.new(http: local_tool).eval(%((get("http://[::ffff:127.0.0.1]:#{@web.port}/"); "reached") rescue $!.class.name))
    assert_equal "Glovebox::HTTPURLError", r.value
    # Without an allowlist entry the host is refused before any lookup.
    r = Glovebox::Sandbox.new(http: local_tool).eval(%((get("http://evil.example.com:#{@web.port}/"); "reached") rescue $!.class.name))
    assert_equal "Glovebox::HTTPHostError", r.value
  end

  def test_url_rules_redirects_and_caps
    sb = Glovebox::Sandbox.new(http: local_tool(max_response_bytes: 1000))
    base = "localhost:#{@web.port}"
    r = sb.eval(<<~RUBY)
      def try = (yield; "reached") rescue $!.class.name
      redirect = get("http://#{base}/redirect")
      [redirect["status"], redirect["headers"]["location"],
       try { get("http://user:pw@#{base}/status") }, try { get("ftp://#{base}/") }, try { get("http://localhost:8081/") },
       try { get("http://#{base}/status", { "X-Bad" => "a\\r\\nInjected: 1" }) }, try { get("http://#{base}/status", { "Host" => "other" }) },
       try { get("http://#{base}/big") }]
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal [302, "http://169.254.169.254/latest/meta-data/", "Glovebox::HTTPURLError", "Glovebox::HTTPURLError",
                  "Glovebox::HTTPURLError", "Glovebox::HTTPHeaderError", "Glovebox::HTTPHeaderError",
                  "Glovebox::HTTPResponseTooLargeError"], r.value
    assert_equal ["/redirect", "/big"], @web.seen.map { _1[1] }, "the redirect was not followed"
  end

  # The budget spans the tool's life across sandboxes, until reset_budget!.
  def test_budget_spans_sandboxes_until_reset
    http = local_tool(max_requests: 2)
    u = "http://localhost:#{@web.port}/status"
    assert_equal 200, Glovebox::Sandbox.new(http: http).eval(%(get("#{u}")["status"])).value
    assert_equal 200, Glovebox::Sandbox.new(http: http).eval(%(get("#{u}")["status"])).value
    r = Glovebox::Sandbox.new(http: http).eval(%((get("#{u}"); "reached") rescue [$!.class.name, $!.message]))
    assert_equal "Glovebox::HTTPBudgetError", r.value[0]
    assert_match(/2 requests/, r.value[1])
    http.reset_budget!
    assert_equal 200, Glovebox::Sandbox.new(http: http).eval(%(get("#{u}")["status"])).value
  end

  # HTTP calls are tool calls here: hooks veto them, approval gates them,
  # the sanitizer rewrites their errors, budgets count them.
  def test_hooks_approval_and_budgets_see_http_calls
    before = []
    sb = Glovebox::Sandbox.new(http: local_tool, tool_calls: 3,
                               before_tool_call: ->(name, args, _kw) { before << name; raise "no posts" if name == :post && args[1] == "x" })
    sb.require_approval(:delete) { |_n, _a, _kw| false }
    u = "http://localhost:#{@web.port}/echo"
    r = sb.eval(%([(post("#{u}", "x") rescue $!.message), (delete("#{u}") rescue $!.class.name), post("#{u}", "y")["status"], get("#{u}")]))
    assert_equal "tool_budget_exceeded", r.status
    assert_equal %i[post delete post], before
    assert_equal %w[vetoed denied ok budget_exceeded], r.tool_calls.map(&:outcome)
    assert_equal %w[POST], @web.seen.map(&:first)
    r = Glovebox::Sandbox.new(http: local_tool, error_sanitizer: ->(name, _e) { "#{name} failed" })
                         .eval(%(get("http://nope.example.com:#{@web.port}/") rescue [$!.class.name, $!.message]))
    assert_equal ["Glovebox::HTTPHostError", "get failed"], r.value
  end

  # In a session and in a paused eval's continuation the functions are
  # the same tool calls.
  def test_sessions_and_pauses
    u = "http://localhost:#{@web.port}/status"
    Glovebox::Sandbox.new(http: local_tool).session do |s|
      s.eval(%(@r = get("#{u}")))
      assert_equal "up", s.eval(%(@r["body"]["status"])).value
    end
    dir = Dir.mktmpdir("glovebox-claims")
    Glovebox::Child.stop
    Glovebox.state_key = "6b" * 32
    Glovebox.state_dir = dir
    sb = Glovebox::Sandbox.new(http: local_tool, suspend: [:post])
    r = sb.eval(%(post("#{u}", "x")["status"]))
    assert r.suspended?
    assert_equal "post", r.pending.name
    assert_equal %w[GET], @web.seen.map(&:first), "nothing was posted while paused"
    assert_equal 200, sb.continue(r.key, approve: true).value
    assert_equal %w[GET POST], @web.seen.map(&:first)
  ensure
    if dir
      Glovebox::Child.stop
      Glovebox.state_key = Glovebox.state_dir = nil
      FileUtils.rm_rf(dir)
    end
  end

  def test_on_request_sees_each_request
    Glovebox::Sandbox.new(http: local_tool).eval(%(get("http://localhost:#{@web.port}/status"); get("http://10.0.0.1/") rescue nil))
    ok, refused = @seen
    assert_equal ["GET", "localhost", "127.0.0.1:#{@web.port}", 200, nil], ok.to_h.values_at(:method, :host, :address, :status, :error)
    assert ok.ok?
    assert ok.duration.positive?
    assert_equal "HTTPURLError", refused.error_class
    refute refused.ok?
    # A failing observer changes nothing.
    http = Glovebox::HttpTool.new(allow: ["localhost"], trust: ["127.0.0.0/8"], allowed_ports: [@web.port], on_request: ->(_r) { raise "boom" })
    assert_equal 200, Glovebox::Sandbox.new(http: http).eval(%(get("http://localhost:#{@web.port}/status")["status"])).value
  end

  def test_prefix_and_code_mode_docs
    sb = Glovebox::Sandbox.new(http: local_tool(prefix: "http_"))
    assert_equal %i[http_delete http_get http_head http_patch http_post http_put http_request], sb.exposed_functions
    desc = Glovebox::CodeMode.new(sb).description
    assert_match(/### http_get\(url, headers\)/, desc)
    assert_match(/to localhost only \(ports #{@web.port}\)/, desc)
    assert_match(/the http_\* functions below make HTTP requests from the host/, desc)
  end

  def test_misconfigurations_fail_at_construction
    { { allow: ["*a.example.com"] } => /\AGlovebox::HttpTool: allow: "\*a.example.com": a wildcard is allowed only as a whole first label/,
      { allow: ["10.0.0.1"] } => /allow: names the IP address "10.0.0.1", but allow_ip_literals: is off/,
      { allow: [] } => /\Aallow: give host patterns/,
      { allow: ["a.example.com"], allowed_ports: [0] } => /\Aallowed_ports:/,
      { allow: ["a.example.com"], max_requests: 0 } => /\Amax_requests: 0/,
      { allow: ["a.example.com"], request_timeout: -1 } => /\Arequest_timeout: -1/,
      { allow: ["a.example.com"], trust: ["10.0.0.0/33"] } => /trust: "10.0.0.0\/33"/,
      { allow: ["a.example.com"], on_request: "log" } => /\Aon_request: String does not respond to call/ }.each do |opts, msg|
      e = assert_raises(Glovebox::ConfigError, opts.inspect) { Glovebox::HttpTool.new(**opts) }
      assert_match msg, e.message
    end
    assert_equal %i[delete get head patch post put request], Glovebox::Sandbox.new(http: Glovebox::HttpTool.new(allow: :any)).exposed_functions
    tools = Class.new { def get(id) = id }.new
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Sandbox.new(tools: tools, http: local_tool) }
    assert_match(/\Aget: exposed already/, e.message)
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Sandbox.new(http: "api.example.com") }
    assert_match(/\Ahttp: give a Glovebox::HttpTool/, e.message)
    e = assert_raises(Glovebox::ConfigError) do
      Glovebox::Sandbox.new(executor: "https://127.0.0.1:1", token: "gbx_x", http: local_tool)
    end
    assert_match(/\Ahttp: .*eval profiles \(profile:\)/, e.message)
  end

  # A forked process has a child of its own: the tool binds there at its
  # first call.
  def test_a_forked_process_binds_again
    http = local_tool
    u = "http://localhost:#{@web.port}/status"
    assert_equal 200, Glovebox::Sandbox.new(http: http).eval(%(get("#{u}")["status"])).value
    rd, wr = IO.pipe
    pid = fork do
      rd.close
      wr.write(Glovebox::Sandbox.new(http: http).eval(%(get("#{u}")["status"])).value.to_s)
      wr.close
      exit!(0)
    end
    wr.close
    Process.wait(pid)
    assert_equal "200", rd.read
  end
end
