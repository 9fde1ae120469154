# frozen_string_literal: true

# glovebox from Ruby: untrusted Ruby in a wasm sandbox whose only way out
# is the methods you expose, and commands in an OS sandbox.
#
# - Glovebox::Sandbox runs Ruby code (CRuby 4.0 in a wasm VM); the
#   guest's calls of exposed tool methods run here, in this process.
# - Glovebox::CodeMode is one code-running tool for a model: RubyLLM's
#   code-mode shape (a RubyLLM::Tool when RubyLLM is loaded), or a
#   Sandbox of yours wrapped.
# - Glovebox::Box runs commands (files, stdin, env, network, limits).
# - Glovebox::HttpTool and Glovebox::MCPServers give the guest HTTP and
#   MCP servers' tools, run by the child with Go's rules.
#
# Embedded by default: the gem starts a glovebox child process of its
# own at the first eval (Glovebox::Child, over a socketpair). With
# executor: (or Glovebox.executor) the same API talks HTTPS to a
# `glovebox executor` on another host; only then are net/http and
# openssl loaded.
#
# Standard library only.
require_relative "glovebox/version"
require_relative "glovebox/errors"
require_relative "glovebox/keys"
require_relative "glovebox/config"
require_relative "glovebox/native"
require_relative "glovebox/setup"
require_relative "glovebox/value"
require_relative "glovebox/status"
require_relative "glovebox/exposure"
require_relative "glovebox/host_tools"
require_relative "glovebox/http_tool"
require_relative "glovebox/mcp_servers"
require_relative "glovebox/guest_code"
require_relative "glovebox/child"
require_relative "glovebox/sandbox"
require_relative "glovebox/embedded"
require_relative "glovebox/profile"
require_relative "glovebox/box"

module Glovebox
  autoload :Client, File.expand_path("glovebox/client", __dir__)
  # Loaded at its first use, so that it is a RubyLLM::Tool when RubyLLM
  # was loaded first (require "ruby_llm" before using it).
  autoload :CodeMode, File.expand_path("glovebox/code_mode", __dir__)
end

# A forked process (a Puma or Unicorn worker, Spring, Sidekiq) must not
# use its parent's child: it starts its own at its first eval.
module Glovebox
  # @private Process._fork's hook (Ruby 3.1+).
  module ForkHook
    def _fork
      pid = super
      Glovebox::Child.after_fork if pid.zero?
      pid
    end
  end
end
Process.singleton_class.prepend(Glovebox::ForkHook)
at_exit { Glovebox::Child.stop }
