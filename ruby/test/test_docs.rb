# frozen_string_literal: true

require_relative "helper"

# docs/ruby.md's Rails snippet runs, with small stand-ins for Rails.
class DocsTest < Minitest::Test
  include ExecutorHarness

  DOC = File.expand_path("../../docs/ruby.md", __dir__)

  def blocks = File.read(DOC).scan(/^```ruby\n(.*?)^```/m).map(&:first)

  def test_rails_snippet_answers
    ENV["GLOVEBOX_URL"] = executor.url
    ENV["GLOVEBOX_TOKEN"] = executor.token
    ENV["GLOVEBOX_CA"] = executor.ca_file
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
    c = mod::AssistantController.new('[orders.size, refund(1), begin; refund(9); rescue Glovebox::NotFound => e; e.message; end]')
    c.answer
    assert_equal "ok", c.rendered["status"], c.rendered.inspect
    assert_equal [1, "refund queued for order 1", "no order 9"], c.rendered["value"]
    refute_includes mod::SupportTools.new(nil).then { Glovebox::Sandbox.new(tools: _1, client: executor.client).exposed_functions }, :audit_log
    mod.module_eval(blocks[1], DOC) # the job compiles
    assert mod::ReportJob.method_defined?(:perform)
    mod.module_eval(blocks[2], DOC) # the approval controller compiles
    assert mod::PlanChangesController.method_defined?(:decide)
  end
end
