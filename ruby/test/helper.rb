# frozen_string_literal: true

require "minitest/autorun"
require_relative "executor_harness"

# Embedded sandboxes start the binary the executor tests use.
ENV["GLOVEBOX_BIN"] = ExecutorHarness.bin
