# frozen_string_literal: true

# Runs every test file: ruby -Ilib -Itest test/all.rb
Dir[File.join(__dir__, "test_*.rb")].sort.each { |f| require f }
