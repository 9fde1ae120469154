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

  def test_model_without_a_key
    out = run_example("model.rb")
    assert_match(/tool run_ruby: Runs a Ruby program/, out)
    assert_match(/"status":"ok","value":30.5/, out)
  end
end
