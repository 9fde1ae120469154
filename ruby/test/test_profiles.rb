# frozen_string_literal: true

require_relative "helper"
require_relative "local_http"
require_relative "desk_tools"

# Host resources by name: Sandbox.new(profile: "analytics"). Through an
# executor, the profile is its operator's (the config's profiles
# section: a read-only directory, the HTTP tool, a timeout), run there
# beside the app's own tools; an unknown one fails at construction.
# Embedded, the same name picks the app's own Glovebox.eval_profiles.
class ProfilesTest < Minitest::Test
  def setup
    @web = LocalHTTP.new { |_c, _m, path, _h, _b| [200, { "Content-Type" => "application/json" }, JSON.generate("path" => path)] }
    @dir = Dir.mktmpdir("glovebox-profile")
    File.write(File.join(@dir, "sales.csv"), "month,total\njan,10\nfeb,32\n")
  end

  def teardown
    @web.stop
    FileUtils.rm_rf(@dir)
  end

  def test_through_an_executor
    tmp = Dir.mktmpdir("glovebox-exec-profile")
    ex = ExecutorHarness::Executor.new(ExecutorHarness.bin, tmp, config_extra: <<~YAML)
      profiles:
        analytics:
          tenants: [app]
          limits: {timeout: 3s}
          mounts: [{host: #{@dir}, guest: /data, description: sales CSVs}]
          http: {allow: [localhost], trust: [127.0.0.0/8], ports: ["#{@web.port}"]}
    YAML
    sb = Glovebox::Sandbox.new(tools: DeskTools.new, only: %i[orders], client: ex.client, profile: "analytics")
    r = sb.eval(<<~RUBY)
      total = File.readlines("/data/sales.csv").drop(1).sum { _1.split(",")[1].to_i }
      denied = begin; File.write("/data/x", "no"); "written"; rescue SystemCallError => e; e.class.name; end
      [total, http_get("http://localhost:#{@web.port}/fx")["body"]["path"], orders.size, denied,
       (http_get("http://169.254.169.254/") rescue $!.class.name)]
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal 42, r.value[0]
    assert_equal ["/fx", 2], r.value[1, 2]
    assert_match(/\AErrno::E/, r.value[3])
    assert_equal "Glovebox::HTTPURLError", r.value[4]
    refute File.exist?(File.join(@dir, "x"))
    assert_equal %w[orders], r.tool_calls.map(&:name), "the profile's tools ran on the executor, the app's here"
    assert_equal "timeout", Glovebox::Sandbox.new(client: ex.client, profile: :analytics, timeout: 20).eval("sleep 5").status
    sb.session do |s|
      s.eval('@rows = File.read("/data/sales.csv").lines.size')
      assert_equal 3, s.eval("@rows").value
    end
    desc = Glovebox::CodeMode.new(sb).description
    assert_match(%r{/data \(read-only\): sales CSVs}, desc)
    assert_match(/### http_get\(url, headers\)/, desc)
    assert_match(/### orders/, desc)
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Sandbox.new(client: ex.client, profile: "billing") }
    assert_match(/\Aprofile: "billing": .*unknown_profile: no eval profile "billing" for tenant app/, e.message)
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Sandbox.new(client: ex.client, profile: "Bad Name") }
    assert_match(/\Aprofile: "Bad Name" is not a profile name/, e.message)
    tools = Class.new { def http_get(url) = url }.new
    e = assert_raises(Glovebox::APIError) { Glovebox::Sandbox.new(tools: tools, client: ex.client, profile: "analytics").eval("1") }
    assert_equal "bad_request", e.code
    assert_match(/http_get: the profile analytics has tools of that name/, e.message)
  ensure
    ex&.stop
    FileUtils.rm_rf(tmp) if tmp
  end

  def test_embedded_the_apps_own
    http = Glovebox::HttpTool.new(allow: ["localhost"], trust: ["127.0.0.0/8"], allowed_ports: [@web.port], prefix: "http_")
    Glovebox.eval_profiles = { "analytics" => { mounts: [{ host: @dir, guest: "/data" }], http: http } }
    sb = Glovebox::Sandbox.new(tools: DeskTools.new, only: %i[orders], profile: "analytics")
    r = sb.eval(%([File.read("/data/sales.csv").lines.size, http_get("http://localhost:#{@web.port}/x")["status"], orders.size]))
    assert_equal [3, 200, 2], r.value
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Sandbox.new(profile: "billing") }
    assert_match(/\Aprofile: "billing": embedded, the profiles are the app's own \(Glovebox.eval_profiles: analytics\)/, e.message)
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Sandbox.new(profile: "analytics", http: http) }
    assert_match(/\Ahttp: given, and the profile analytics has one/, e.message)
  ensure
    Glovebox.eval_profiles = {}
  end
end
