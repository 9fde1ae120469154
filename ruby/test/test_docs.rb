# frozen_string_literal: true

require_relative "helper"

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

  def test_readme_first_example_is_examples_first
    first = File.read(File.expand_path("../examples/first.rb", __dir__))
    code = blocks(README).first
    assert_includes first, code.strip
  end
end
