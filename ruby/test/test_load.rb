# frozen_string_literal: true

require "minitest/autorun"
require "rbconfig"

# The gem needs nothing but Ruby and its standard library.
class LoadTest < Minitest::Test
  LIB = File.expand_path("../lib", __dir__)

  def test_loads_with_gems_disabled
    code = 'require "glovebox"; print [Glovebox::Sandbox, Glovebox::Box, Glovebox::CodeMode, Glovebox::VERSION].join(" ")'
    out = IO.popen([RbConfig.ruby, "--disable-gems", "-I", LIB, "-e", code], err: %i[child out], &:read)
    assert $?.success?, out
    assert_match(/\AGlovebox::Sandbox Glovebox::Box Glovebox::CodeMode \d+\.\d+\.\d+\z/, out)
  end

  def test_gemspec_has_no_dependencies
    spec = File.read(File.expand_path("../glovebox.gemspec", __dir__))
    refute_match(/add_(runtime_|development_)?dependency/, spec)
  end
end
