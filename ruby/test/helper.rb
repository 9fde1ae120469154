# frozen_string_literal: true

require "minitest/autorun"
require_relative "executor_harness"
