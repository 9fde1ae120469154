# frozen_string_literal: true

require_relative "helper"
require_relative "ruby_llm_standin" # before Glovebox::CodeMode is first used
require "tmpdir"
require "fileutils"

# docs/ruby.md's Rails snippets run embedded, with small stand-ins for
# Rails; the README's first example is examples/first.rb.
class DocsTest < Minitest::Test
  DOC = File.expand_path("../../docs/ruby.md", __dir__)
  README = File.expand_path("../README.md", __dir__)

  def blocks(path = DOC) = File.read(path).scan(/^```ruby\n(.*?)^```/m).map(&:first)

  def test_rails_snippet_answers
    stubs = <<~RUBY
      class ApplicationController
        User = Struct.new(:id, :name, :refunds_today)
        attr_reader :rendered, :params
        def initialize(code) = @params = Params.new(code)
        def current_user = User.new(7, "Ada", 0)
        def render(json:) = @rendered = json
        Params = Struct.new(:code) { def require(_k) = code }
      end
      class ApplicationJob; end
    RUBY
    mod = Module.new
    mod.module_eval(stubs + blocks.first, DOC)
    assert_equal 5, Glovebox.timeout
    c = mod::AssistantController.new('[orders.size, refund(1), begin; refund(9); rescue Glovebox::NotFound => e; e.message; end]')
    c.answer
    assert_equal "ok", c.rendered["status"], c.rendered.inspect
    assert_equal [1, "refund queued for order 1", "no order 9"], c.rendered["value"]
    refute_includes Glovebox::Sandbox.new(tools: mod::SupportTools.new(nil)).exposed_functions, :audit_log
    mod.module_eval(blocks[1], DOC) # the job compiles
    assert mod::ReportJob.method_defined?(:perform)
    mod.module_eval(blocks[2], DOC) # the approval controller compiles
    assert mod::PlanChangesController.method_defined?(:decide)
  ensure
    Glovebox.configure do |cfg|
      cfg.timeout = nil
      cfg.logger = nil
    end
  end

  # A block's "code  #=> literal" lines, each checked when it runs.
  def checked(block)
    block.gsub(/^(?<code>\S.*?)\s+#=> (?<exp>"(?:[^"\\]|\\.)*"|\[.*?\]|-?\d+)(?=[\s,]|$).*$/) do
      "__doc_check((#{$~[:code]}), #{$~[:exp]}, #{$~[:code].dump})"
    end
  end

  # A module to run a doc block in, with __doc_check.
  def doc_module
    Module.new do
      def self.__doc_check(got, want, src)
        raise Minitest::Assertion, "docs/ruby.md: #{src} gave #{got.inspect}, the doc says #{want.inspect}" unless got == want
      end
    end
  end

  # The "Coming from ..." sections' examples run as written, each
  # "#=>" holding (RubyLLM is the test's stand-in, its MCP server one
  # registered here).
  def test_seed_sections
    enclave, security_box, code_mode = %w[glovebox/enclave Glovebox.eval class\ Analytics].map do |mark|
      blocks.find { _1.include?(mark) } or flunk "no docs/ruby.md block with #{mark}"
    end
    require "glovebox/enclave"
    doc_module.module_eval(checked(enclave), DOC)
    doc_module.module_eval(checked(security_box), DOC)
    RubyLLM::MCP.register("https://learn.example/api/mcp", name: "docs", tools: {
      "search" => { description: "Searches", input_schema: {}, handler: ->(a) { a } },
    })
    Dir.mktmpdir do |dir|
      %w[data/input workspace].each { FileUtils.mkdir_p(File.join(dir, _1)) }
      mod = doc_module
      Dir.chdir(dir) { mod.module_eval(checked(code_mode.sub('require "ruby_llm"', "")), DOC) }
      tool = mod::Analytics.new
      assert_equal %w[notes search], tool.bindings.keys
      RubyLLM::Chat.script << [{ name: "analytics", arguments: { "code" => 'SB.call("notes", note: "x")[:recorded]' } }]
      assert_equal "x", JSON.parse(mod.module_eval { RubyLLM.chat.with_tools(mod::Analytics) }.ask("?").content)["value"]
    end
  ensure
    Glovebox.reset_profiles!
    Enclave.timeout = nil if defined?(Enclave)
  end

  def test_readme_first_example_is_examples_first
    first = File.read(File.expand_path("../examples/first.rb", __dir__))
    code = blocks(README).first
    assert_includes first, code.strip
  end
end
