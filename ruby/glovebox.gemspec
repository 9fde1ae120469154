# frozen_string_literal: true

require_relative "lib/glovebox/version"

Gem::Specification.new do |s|
  s.name = "glovebox"
  s.version = Glovebox::VERSION
  s.summary = "Run untrusted Ruby in a wasm sandbox whose only way out is your methods"
  s.description = "Enclave-style sandboxes whose tool methods run in your process, code mode for " \
                  "model SDKs, and boxes that run commands: embedded (the gem starts glovebox " \
                  "itself) or through a glovebox executor on another host. Standard library only."
  s.authors = ["glovebox authors"]
  s.license = "Apache-2.0"
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb"] + ["README.md"]
  s.require_paths = ["lib"]
  # No runtime dependencies: json, socket, securerandom (and, for an executor, net/http
  # and openssl) ship with Ruby.
end
