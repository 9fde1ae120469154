# frozen_string_literal: true

require_relative "helper"
require_relative "ruby_llm_standin" # before Glovebox::CodeMode is first used: it is then a RubyLLM::Tool
require "tmpdir"
require "open3"

# RubyLLM's code-mode shape (seed 002) on glovebox: Glovebox::CodeMode
# subclasses declared with mount/mount_rw/tools/mcps, bound RubyLLM tools
# and MCP servers, embedded, against the real binary. RubyLLM itself is
# the stand-in in ruby_llm_standin.rb.
class RubyLLMCodeModeTest < Minitest::Test
  module App; end

  class Notes < RubyLLM::Tool
    description "Records a finding in the analysis log"
    parameter :note, type: "string", description: "The finding to record"

    def self.log = @log ||= []

    def execute(note:)
      Notes.log << note
      { recorded: note, at: :now }
    end
  end

  class Weather < RubyLLM::Tool
    description "Current weather for a city"
    param :city, desc: "City name"

    def initialize = @calls = 0

    def execute(city:)
      @calls += 1
      raise ArgumentError, "no city" if city.empty?

      { city: city, temp_c: 21.5, calls: @calls, seen: Object.new }
    end
  end

  class Positional < RubyLLM::Tool
    def execute(city) = city
  end

  class NoKeywords < RubyLLM::Tool
    param :city
    def execute = :sunny
  end

  class Clock < RubyLLM::Tool
    description "The time"
    def execute = "noon"
  end

  class Search < RubyLLM::Tool
    description "Searches for the current user"
    def initialize(user:) = @user = user
    def execute(q:) = "#{@user}: #{q}"
  end

  DOCS_URL = "https://learn.example/api/mcp"

  def setup
    RubyLLM::MCP.register(DOCS_URL, name: "microsoft_docs", instructions: "Search before you fetch.", tools: {
      "microsoft_docs_search" => { description: "Searches the docs", handler: ->(args) { { "hits" => ["#{args["query"]} overview"] } },
                                   input_schema: { "type" => "object", "properties" => { "query" => { "type" => "string" } }, "required" => ["query"] } },
      "broken" => { description: "Always fails", input_schema: { "type" => "object" }, handler: ->(_) { raise "upstream 500" } },
    })
    RubyLLM::MCP.register("https://git.example/mcp", name: "github", tools: {
      "search" => { description: "Searches code", input_schema: { "type" => "object" }, handler: ->(_) { "code" } },
    })
    Notes.log.clear
    @dir = Dir.mktmpdir("codemode")
    %w[data/input workspace].each { FileUtils.mkdir_p(File.join(@dir, _1)) }
    File.write(File.join(@dir, "data/input/sales.csv"), "month,amount\n2026-01,10\n2026-01,5\n2026-02,7\n")
  end

  def teardown
    FileUtils.rm_rf(@dir)
    App.constants.each { App.send(:remove_const, _1) }
  end

  # A CodeMode subclass named App::<name>, declared by the block in @dir.
  def code_mode(name, parent = Glovebox::CodeMode, &block)
    klass = Class.new(parent)
    App.const_set(name, klass)
    Dir.chdir(@dir) { klass.class_eval(&block) } if block
    klass
  end

  def run_tool(tool, code) = JSON.parse(tool.execute(code: code))

  # Seed 002's README example, with the require and the class name
  # changed: a chat given the class; the (scripted) model's program
  # reads the CSVs, writes a report, records a finding and asks the MCP
  # server.
  def test_readme_example
    docs = RubyLLM.mcp(url: DOCS_URL)
    analytics = code_mode(:Analytics) do
      mount    source: "data/input", dest: "/data",      description: "CSV files with the raw data (read only)"
      mount_rw source: "workspace",  dest: "/workspace", description: "Write generated reports and artifacts here"

      tools Notes
      mcps docs
    end
    assert_operator analytics, :<, RubyLLM::Tool
    chat = RubyLLM.chat
    chat.with_tools(analytics)
    tool = chat.tools.fetch(:analytics)
    assert_equal "analytics", tool.name
    RubyLLM::Chat.script << [{ name: "analytics", arguments: { "code" => <<~RUBY } }]
      require "csv"
      totals = Hash.new(0)
      Dir["/data/*.csv"].each { |f| CSV.foreach(f, headers: true) { |r| totals[r["month"]] += r["amount"].to_i } }
      File.write("/workspace/report.md", totals.map { |m, t| "- \#{m}: \#{t}" }.join("\\n"))
      biggest = totals.max_by { _2 }
      SB.call("notes", note: "biggest month \#{biggest[0]}")
      docs = SB.call("microsoft_docs_search", query: "Azure Blob Storage")
      puts docs[:text]
      { totals: totals, biggest: biggest, docs: docs[:structured], error: docs[:error] }
    RUBY
    answer = chat.ask "Compute the total sales per month from the CSVs in /data, save the report to /workspace/report.md, " \
                      "record the biggest finding in the notes log and check the Azure docs for the storage API you used"
    out = JSON.parse(answer.content)
    assert_equal "ok", out["status"], out.inspect
    assert_equal({ "totals" => { "2026-01" => 15, "2026-02" => 7 }, "biggest" => ["2026-01", 15],
                   "docs" => { "hits" => ["Azure Blob Storage overview"] }, "error" => false }, out["value"])
    assert_equal %({"hits":["Azure Blob Storage overview"]}\n), out["stdout"]
    assert_equal "- 2026-01: 15\n- 2026-02: 7", File.read(File.join(@dir, "workspace/report.md"))
    assert_equal ["biggest month 2026-01"], Notes.log
  end

  def test_description_lists_folders_and_tools
    docs = RubyLLM.mcp(url: DOCS_URL)
    klass = code_mode(:Analytics) do
      mount    source: "data/input", dest: "/data",      description: "CSV files with the raw data"
      mount_rw source: "workspace",  dest: "/workspace", description: "Write reports here"
      tools Notes, "forecast" => Weather
      mcps docs
      instructions "Answer in euros."
    end
    d = klass.new.description
    assert_match(/^## How to use$/, d)
    assert_match(/fresh Ruby 4\.0 process/, d)
    assert_match(/after 30 s of wall-clock time/, d)
    assert_match(/^## Read-only folders\n\n- `\/data` — CSV files with the raw data$/, d)
    assert_match(/^## Read-write folders\n\n- `\/workspace` — Write reports here$/, d)
    assert_match(/^## Host tools$/, d)
    assert_match(/^### notes\n\nRecords a finding in the analysis log\n\nParameters:\n- note \(string, required\): The finding to record\n\nExample: SB.call\("notes", note: "..."\)$/, d)
    assert_match(/^### forecast\n\nCurrent weather for a city/, d)
    assert_match(/^### microsoft_docs_search\n\nSearches the docs\n\(a tool of the MCP server microsoft_docs/, d)
    assert_match(/^- query \(string, required\)$/, d)
    assert_match(/^## Server notes\n\n### microsoft_docs\n\nSearch before you fetch\.$/, d)
    assert_match(/^## Notes\n\nAnswer in euros\.$/, d)
    assert_equal Glovebox::CodeMode::PARAMS_SCHEMA, klass.new.params_schema
    assert_equal({ name: "analytics", description: d, parameters: Glovebox::CodeMode::PARAMS_SCHEMA }, klass.new.to_h)
    assert klass.new.parameters.key?(:code), "RubyLLM's declared parameter"
    assert_equal [Notes, Weather], klass.tools.map(&:class)
    assert_equal [docs], klass.mcps
    bare = code_mode(:Bare).new.description
    refute_match(/Host tools|folders/, bare)
  end

  def test_bound_tools_called_with_keywords
    klass = code_mode(:Assistant) do
      tools Weather
      tools "forecast" => Weather.new
      limits timeout_ms: 5_000
    end
    tool = klass.new
    out = run_tool(tool, <<~RUBY)
      a = SB.call("weather", city: "Porto Alegre")
      b = SB.call("weather", city: "Oslo")
      c = SB.call("forecast", "city" => "Rome")
      bad = SB.call("weather", town: "x")
      err = begin; SB.call("weather", city: ""); rescue SB::ToolError => e; [e.class.name, e.message]; end
      unknown = begin; SB.call("nope"); rescue SB::UnknownTool => e; e.message; end
      plain = weather(city: "Lima")
      [a[:temp_c], a.city, b[:calls], c[:calls], a[:seen].start_with?("#<Object"), bad[:error], err, unknown, plain["city"], SB.tools]
    RUBY
    assert_equal "ok", out["status"], out.inspect
    temp, city, calls_b, calls_c, seen, bad, err, unknown, plain, names = out["value"]
    assert_equal [21.5, "Porto Alegre", 2, 1, true], [temp, city, calls_b, calls_c, seen], "one instance per bound class: state lasts"
    assert_match(/Invalid tool arguments for weather: missing city; unknown town/, bad)
    assert_equal ["SB::ToolError", "ArgumentError: no city"], err
    assert_match(/no host tool named "nope" \(bound: weather, forecast\)/, unknown)
    assert_equal "Lima", plain
    assert_equal %w[weather forecast], names
    assert_equal "weather", tool.last_result.tool_calls.first.name
    out = run_tool(tool, "x")
    assert_equal "error", out["status"]
    assert_equal "NameError", out.dig("error", "class")
    assert_equal ["sandbox:1:in '<main>'"], out.dig("error", "backtrace")
    out = run_tool(tool, "loop {}")
    assert_equal "ok", run_tool(tool, "1").values_at("status").first
    slow = code_mode(:Slow) { limits timeout_ms: 300 }
    out = run_tool(slow.new, "loop {}")
    assert_equal "timeout", out["status"]
    assert_match(/wall-clock/, out["error"])
    assert_equal "invalid_input", JSON.parse(tool.call({}))["status"]
    assert_equal 2, JSON.parse(tool.call({ "code" => "1 + 1" }))["value"]
    assert_equal 3, JSON.parse(tool.call(code: "1 + 2"))["value"]
  end

  def test_mcp_results_and_collisions
    klass = code_mode(:Research) do
      tools "search" => Clock
      mcps RubyLLM.mcp(url: DOCS_URL), RubyLLM.mcp(url: "https://git.example/mcp")
    end
    assert_equal %w[search microsoft_docs_search broken github_search], klass.new.bindings.keys
    out = run_tool(klass.new, <<~RUBY)
      r = SB.call("microsoft_docs_search", query: "blob")
      b = SB.call("broken")
      [r[:text], r[:structured], r[:error], b[:error], b[:text], SB.call("github_search")[:text], SB.call("search")]
    RUBY
    assert_equal ['{"hits":["blob overview"]}', { "hits" => ["blob overview"] }, false, true, "upstream 500", "code", "noon"], out["value"]
    e = assert_raises(Glovebox::ConfigError) do
      code_mode(:Stuck) do
        tools "github_search" => Clock
        tools "search" => Clock
        mcps RubyLLM.mcp(url: "https://git.example/mcp")
      end
    end
    assert_match(/github's tool search collides with "github_search"/, e.message)
    e = assert_raises(Glovebox::ConfigError) { code_mode(:Down) { mcps RubyLLM.mcp(url: "https://down.example/mcp") } }
    assert_match(/could not list its tools: IOError: connection refused/, e.message)
    e = assert_raises(Glovebox::ConfigError) { code_mode(:NotServer) { mcps Object.new } }
    assert_match(/Object is not an MCP server/, e.message)
    server_class = Class.new do
      define_method(:initialize) { |user:| @user = user }
      define_method(:name) { "linear" }
      define_method(:tools) { [RubyLLM::MCP::Tool.new(name: "issues", description: "", input_schema: {}, handler: ->(_) { "for #{@user}" })] }
    end
    k = code_mode(:PerUser) { mcps server_class, user: "ada" }
    assert_equal "for ada", run_tool(k.new, 'SB.call("issues")[:text]')["value"]
  end

  def test_invalid_declarations_raise_at_definition
    {
      proc { mount source: "missing", dest: "/data" } => /host directory .*missing does not exist/,
      proc { mount source: "data", dest: "/tmp" } => %r{overlaps /tmp},
      proc { mount source: "data", dest: "data" } => /relative/,
      proc { mount source: "data", dest: "/usr/share/x" } => %r{overlaps /usr},
      proc { mount source: "data", dest: "/d"; mount_rw source: "workspace", dest: "/d" } => %r{/d is mounted twice},
      proc { tools Notes, Notes } => /notes is bound already/,
      proc { tools Positional } => /takes positional arguments \(city\).*def execute\(city:\)/,
      proc { tools NoKeywords } => /takes no keywords, but the tool declares parameters \(city\)/,
      proc { tools Object } => /has no execute method/,
      proc { tools Search } => /Search.new needs arguments/,
      proc { tools Glovebox::CodeMode } => /cannot be bound inside another/,
      proc { tools(Array.new(65) { |i| { "t#{i}" => Clock } }.reduce(:merge)) } => /65 tools bound, more than 64/,
      proc { limits timeout_ms: -5 } => /timeout_ms: -5/,
    }.each do |decl, msg|
      e = assert_raises(Glovebox::ConfigError, msg.inspect) { code_mode(:"Bad#{rand(1 << 30)}", &decl) }
      assert_match msg, e.message
    end
    k = code_mode(:Partial) { tools Notes }
    assert_raises(Glovebox::ConfigError) { k.tools Clock, Notes }
    assert_equal %w[notes], k.new.bindings.keys, "a failed tools call binds nothing"
    assert code_mode(:Ok) { tools Clock }, "an execute without arguments is a tool without parameters"
  end

  def test_read_only_and_read_write_folders
    klass = code_mode(:Files) do
      mount    source: "data/input", dest: "/data"
      mount_rw source: "workspace",  dest: "/workspace"
    end
    out = run_tool(klass.new, <<~RUBY)
      ro = begin; File.write("/data/x.txt", "no"); :written; rescue SystemCallError => e; e.class.name; end
      File.write("/workspace/out.txt", "yes")
      [ro, File.read("/data/sales.csv").lines.size]
    RUBY
    assert_match(/\AErrno::E(PERM|ACCES|ROFS)\z/, out["value"][0])
    assert_equal 4, out["value"][1]
    refute File.exist?(File.join(@dir, "data/input/x.txt"))
    assert_equal "yes", File.read(File.join(@dir, "workspace/out.txt"))
  end

  def test_instance_additions_and_inheritance
    base = code_mode(:Base) do
      mount source: "data/input", dest: "/data"
      tools Clock
    end
    child = code_mode(:Child, base) { tools Notes }
    assert_equal %w[clock notes], child.new.bindings.keys
    assert_equal %w[clock], base.new.bindings.keys
    assert_equal ["/data"], child.folders.map(&:dest)
    assert_equal "child", child.new.name
    tool = base.new
    tool.add_tools(Search.new(user: "ada"))
    tool.add_mcps(RubyLLM.mcp(url: DOCS_URL))
    assert_match(/### search\n/, tool.description)
    assert_match(/### microsoft_docs_search\n/, tool.description)
    refute_match(/### search\n/, base.new.description, "the class is unaffected")
    e = assert_raises(Glovebox::ConfigError) { tool.add_tools(Clock) }
    assert_match(/clock is bound already/, e.message)
    e = assert_raises(Glovebox::ConfigError) { tool.add_tools(Weather, Clock) }
    assert_match(/clock is bound already/, e.message)
    refute_includes tool.bindings.keys, "weather", "all or nothing"
    assert_equal "ada: x", run_tool(tool, 'SB.call("search", q: "x")')["value"]
    e = assert_raises(Glovebox::ConfigError) { tool.add_tools(Weather) }
    assert_match(/configured at the first execution/, e.message)
    chat = RubyLLM.chat.with_tools(tool)
    assert_same tool, chat.tools[:base]
  end

  # glovebox's own CodeMode (over a Sandbox) keeps working with RubyLLM
  # loaded, and can be handed to a chat too.
  def test_glovebox_code_mode_over_a_sandbox
    tool = Glovebox::CodeMode.new(Glovebox::Sandbox.new(tools: { orders: -> { [1, 2] } }), name: "desk")
    assert_equal "desk", tool.name
    assert_equal ["code"], tool.parameters["required"]
    assert_equal 2, JSON.parse(tool.call(code: "orders.size"))["value"]
    chat = RubyLLM.chat.with_tool(tool)
    RubyLLM::Chat.script << [{ name: "desk", arguments: { "code" => "orders.sum" } }]
    assert_equal 3, JSON.parse(chat.ask("total?").content)["value"]
  end

  # LLM libraries pass the arguments every way: code:, a Hash with
  # "code" or :code, "code" => as a keyword (String key); call and
  # execute take them all, for a Sandbox's tool and a declared class's.
  def test_arguments_as_llm_libraries_pass_them
    tools = [Glovebox::CodeMode.new(Glovebox::Sandbox.new(tools: { orders: -> { [1, 2] } })), code_mode(:Args) {}.new]
    tools.each do |tool|
      %i[call execute].each do |m|
        got = [tool.public_send(m, "code" => "1 + 1"), tool.public_send(m, { "code" => "1 + 1" }),
               tool.public_send(m, { code: "1 + 1" }), tool.public_send(m, code: "1 + 1")]
        assert_equal [2] * 4, got.map { JSON.parse(_1)["value"] }, "#{tool.class}##{m}"
        assert_equal "invalid_input", JSON.parse(tool.public_send(m, { "code" => 5 }))["status"]
        assert_equal "invalid_input", JSON.parse(tool.public_send(m))["status"]
      end
    end
  end

  # Without RubyLLM the gem loads and the same class works on its own;
  # RubyLLM loaded after CodeMode's first use is named as the mistake.
  def test_without_ruby_llm_in_a_process_of_its_own
    script = <<~RUBY
      require "glovebox"
      Dir.chdir(ARGV[0])
      class Analytics < Glovebox::CodeMode
        mount source: "data/input", dest: "/data"
      end
      t = Analytics.new
      out = JSON.parse(t.execute(code: 'File.read("/data/sales.csv").lines.size'))
      puts [Analytics.superclass.superclass, t.name, out["value"], t.parameters["required"].inspect, defined?(RubyLLM).inspect].join(" ")
      module RubyLLM; class Tool; end; end
      begin
        Class.new(Glovebox::CodeMode) { mount source: "data/input", dest: "/d" }
      rescue Glovebox::ConfigError => e
        puts e.message
      end
    RUBY
    out, status = Open3.capture2e({ "GLOVEBOX_BIN" => ExecutorHarness.bin }, RbConfig.ruby, "-I", File.expand_path("../lib", __dir__),
                                  "-e", script, @dir)
    assert status.success?, out
    lines = out.lines.grep_v(/INFO/)
    assert_equal "Object analytics 4 [\"code\"] nil\n", lines[0]
    assert_match(/RubyLLM was loaded after Glovebox::CodeMode was first used.*require "ruby_llm" before/, lines[1])
  end
end
