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

  REPO = "https://github.com/gloveboxhq/glovebox/blob/main/"
  ROOT = File.expand_path("../..", __dir__)

  def gemspec = Dir.chdir(File.expand_path("..", __dir__)) { Gem::Specification.load("glovebox.gemspec") }

  # GitHub's anchor for a heading.
  def anchor(heading) = heading.downcase.gsub(/[^\w\- ]/, "").tr(" ", "-")

  # The README is read from an installed gem too, where nothing of the
  # repository is beside it: every link is the repository's absolute URL
  # (the gemspec's homepage) to a file (and heading) that exists, or an
  # anchor of the README's own; no repository file is named without one;
  # the examples it names ship in the gem.
  def test_readme_links_work_from_an_installed_gem
    spec = gemspec
    assert_equal REPO, "#{spec.homepage}/blob/main/"
    text = File.read(README)
    own = text.scan(/^#+ (.+)$/).flatten.map { anchor(_1) }
    text.scan(/\]\(([^)\s]+)\)/).flatten.each do |link|
      if link.start_with?("#")
        assert_includes own, link[1..], "README links #{link}: no such heading"
        next
      end
      next if link == "https://github.com/gloveboxhq/glovebox"

      assert link.start_with?(REPO), "README links #{link}: from an installed gem only the repository's URL works"
      path, frag = link.delete_prefix(REPO).split("#", 2)
      file = File.join(ROOT, path)
      assert File.file?(file), "README links #{link}: the repository has no #{path}"
      next unless frag && path.end_with?(".md")

      assert_includes File.read(file).scan(/^#+ (.+)$/).flatten.map { anchor(_1) }, frag, "README links #{link}: #{path} has no such heading"
    end
    bare = text.gsub(/\[[^\]]*\]\([^)]*\)/, "")
    refute_match(%r{(?<![\w/])(docs/[\w.-]+\.md|EXECUTOR\.md|RATIONALE\.md)}, bare, "a repository file named without a link")
    named = text.scan(%r{\bexamples/\w+\.rb}).uniq
    refute_empty named
    named.each { assert_includes spec.files, _1, "the README names #{_1}: the gem must ship it" }
  end

  # The statuses the README lists are every status there is.
  def test_readme_lists_every_status
    line = File.read(README)[/^r\.status\s+#.*$/] or flunk "no r.status line in the README"
    assert_equal Glovebox::Status::ALL.keys.sort, line.scan(/"(\w+)"/).flatten.sort
  end

  # Child.current.info has the shape the README gives.
  def test_readme_child_info_shape
    doc = File.read(README)[/`Glovebox::Child\.current\.info`[^`]*`(\{.*?\}\})`/m, 1] or flunk "no info shape in the README"
    info = Glovebox::Child.current.info
    assert_equal info.keys.sort, doc.sub(/\{[^{}]*\}(?=\}\z)/, "").scan(/"(\w+)"/).flatten.sort
    skip "no OS sandbox here: #{info["box"]["error"]}" if info["box"]["error"]
    assert_equal info["box"].keys.sort, doc[/=> \{([^{}]*)\}/, 1].scan(/"(\w+)"/).flatten.sort
  end

  def test_readme_first_example_is_examples_first
    first = File.read(File.expand_path("../examples/first.rb", __dir__))
    code = blocks(README).first
    assert_includes first, code.strip
  end
end
