# frozen_string_literal: true

require "minitest/autorun"
require_relative "executor_harness"

# Embedded sandboxes start the binary the executor tests use.
ENV["GLOVEBOX_BIN"] = ExecutorHarness.bin

# Runs the block with Glovebox.executor (and its token and CA) set to the
# test run's executor, so that sandboxes made without executor: run
# there; embedded again afterwards.
module ThroughExecutor
  def through_executor
    Glovebox.configure do |c|
      c.executor = ExecutorHarness.executor.url
      c.token = ExecutorHarness.executor.token
      c.ca_file = ExecutorHarness.executor.ca_file
    end
    yield
  ensure
    Glovebox.configure do |c|
      c.executor = c.token = c.ca_file = nil
    end
  end
end
