# frozen_string_literal: true

# The gem's own tests on a real `glovebox executor` on loopback, through
# Glovebox::Testing (lib/glovebox/testing.rb): the binary is
# $GLOVEBOX_BIN, else built with `go build ./cmd/glovebox` from the
# repository root (never a glovebox found on PATH, which may be older).
require "glovebox/testing"

module ExecutorHarness
  ROOT = File.expand_path("../..", __dir__)

  # Glovebox::Testing::LocalExecutor with the (bin, dir) arguments the
  # tests pass; the bwrap backend, since the Box tests run commands.
  class Executor < Glovebox::Testing::LocalExecutor
    def initialize(bin, dir, **opts) = super(bin: bin, dir: dir, **opts)
  end

  def self.bin
    @bin ||= ENV["GLOVEBOX_BIN"].to_s.empty? ? build : ENV["GLOVEBOX_BIN"]
  end

  def self.build
    out = File.join(Dir.mktmpdir("glovebox-bin"), "glovebox")
    system("go", "build", "-o", out, "./cmd/glovebox", chdir: ROOT) || raise("go build ./cmd/glovebox failed")
    out
  end

  # The shared executor of a test run.
  def self.executor = Glovebox::Testing.local_executor(bin: bin)

  # A second shared executor, started with --state-key (sessions stored,
  # evals may pause); its own directory and store.
  def self.state_executor = Glovebox::Testing.local_executor(bin: bin, state_key: true)

  def executor = ExecutorHarness.executor

  def state_executor = ExecutorHarness.state_executor

  def sandbox(tools = nil, **opts) = executor.sandbox(tools, **opts)
end
