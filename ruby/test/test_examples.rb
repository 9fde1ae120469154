# frozen_string_literal: true

require_relative "helper"
require "rbconfig"

# The examples run as a reader would run them, against the test executor.
class ExamplesTest < Minitest::Test
  include ExecutorHarness

  def run_example(name)
    env = { "GLOVEBOX_URL" => executor.url, "GLOVEBOX_TOKEN" => executor.token, "GLOVEBOX_CA" => executor.ca_file,
            "ANTHROPIC_API_KEY" => nil }
    dir = File.expand_path("..", __dir__)
    out = IO.popen(env, [RbConfig.ruby, "-I", File.join(dir, "lib"), File.join(dir, "examples", name)], err: %i[child out], &:read)
    assert $?.success?, out
    out
  end

  def test_supportdesk
    out = run_example("supportdesk.rb")
    assert_match(/ok: 2 /, out)
    assert_match(/ok: 149.75/, out)
    assert_match(/"filters, mugs"/, out)
    assert_match(/sorry: no order 104 for this customer/, out)
    assert_match(/"that needs a person".*change_plan:denied/, out)
  end

  # The README's first example and the Rails-flavoured one, embedded:
  # nothing in their environment but the binary's path.
  def run_embedded(name)
    dir = File.expand_path("..", __dir__)
    env = { "GLOVEBOX_BIN" => ENV.fetch("GLOVEBOX_BIN"), "GLOVEBOX_URL" => nil, "GLOVEBOX_STATE_KEY" => nil }
    out = IO.popen(env, [RbConfig.ruby, "-I", File.join(dir, "lib"), File.join(dir, "examples", name)], err: %i[child out], &:read)
    assert $?.success?, out
    out
  end

  def test_first
    assert_equal "\"ok\"\n30.5\n[\"orders\"]\n", run_embedded("first.rb").lines.grep_v(/INFO -- /).join
  end

  def test_rails
    out = run_embedded("rails.rb")
    assert_match(/^Ada: ok 30.5$/, out)
    assert_match(/^Bob: ok "Glovebox::ToolDenied"$/, out)
    assert_match(/^Ada refunds order 3: no order 3$/, out)
    assert_match(/^paused: suspended at change_plan\(pro\), plan still free$/, out)
    assert_match(/^approved: ok "plan is pro", output "asking\\n", plan now pro$/, out)
  end

  def test_model_without_a_key
    out = run_example("model.rb")
    assert_match(/tool run_ruby: Runs a Ruby program/, out)
    assert_match(/"status":"ok","value":30.5/, out)
  end
end
