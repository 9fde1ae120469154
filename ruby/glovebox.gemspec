# frozen_string_literal: true

require_relative "lib/glovebox/version"

Gem::Specification.new do |s|
  s.name = "glovebox"
  s.version = Glovebox::VERSION
  s.summary = "Run untrusted Ruby in a wasm sandbox whose only way out is your methods"
  s.description = "Enclave-style sandboxes whose tool methods run in your process, code mode for " \
                  "model SDKs, and boxes that run commands: embedded (the gem starts glovebox " \
                  "itself) or through a glovebox executor on another host. The platform gems " \
                  "(x86_64-linux, aarch64-linux) pack the glovebox binary and its Ruby image: " \
                  "no Go, npm or daemon to install. Standard library only."
  s.authors = ["glovebox authors"]
  s.license = "Apache-2.0"
  s.required_ruby_version = ">= 3.1"
  s.homepage = "https://github.com/gloveboxhq/glovebox"
  # The examples ship too: the README runs them (examples/first.rb is its
  # first example), and a gem user has no checkout to find them in.
  s.files = Dir["lib/**/*.rb"] + Dir["examples/*.rb"] + ["README.md", "exe/glovebox"]
  s.bindir = "exe"
  s.executables = ["glovebox"]
  s.require_paths = ["lib"]
  # No runtime dependencies: json, socket, securerandom (and, for an executor, net/http
  # and openssl) ship with Ruby.

  # A platform gem (`make gem` sets GLOVEBOX_GEM_PLATFORM, e.g.
  # x86_64-linux) packs the glovebox binary for that platform, the Ruby
  # image it runs and that image compiled for the platform (the plain and
  # fuel-metered .cwasm modules) under lib/glovebox/native/, as nokogiri and
  # tailwindcss-ruby pack theirs; RubyGems installs the one matching the
  # machine, and this plain gem elsewhere (README.md, "Install").
  platform = ENV.fetch("GLOVEBOX_GEM_PLATFORM", "")
  unless platform.empty?
    s.platform = Gem::Platform.new(platform)
    s.files += ["lib/glovebox/native/glovebox", "lib/glovebox/native/ruby+stdlib.wasm"] +
               Dir["lib/glovebox/native/*.cwasm"]
  end
end
