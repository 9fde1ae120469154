# frozen_string_literal: true

require_relative "lib/glovebox/version"

Gem::Specification.new do |s|
  s.name = "glovebox"
  s.version = Glovebox::VERSION
  s.summary = "Run untrusted Ruby and commands off-host through a glovebox executor"
  s.description = "A client for the glovebox executor: Enclave-style sandboxes whose tool " \
                  "methods run in your process, code mode for model SDKs, and boxes that run " \
                  "commands with idempotency keys. Standard library only."
  s.authors = ["glovebox authors"]
  s.license = "Apache-2.0"
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb"] + ["README.md"]
  s.require_paths = ["lib"]
  # No runtime dependencies: net/http, openssl, json and securerandom ship with Ruby.
end
