# frozen_string_literal: true

# glovebox from Ruby: a client for a `glovebox executor` (EXECUTOR.md).
#
# - Glovebox::Sandbox runs Ruby code in the executor's wasm sandbox; the
#   guest's calls of exposed tool methods run here, in this process.
# - Glovebox::CodeMode wraps a Sandbox as one tool for a model.
# - Glovebox::Box runs commands (files, stdin, env, network, limits) with
#   idempotency keys and in-doubt errors.
#
# Standard library only (net/http, openssl, json, securerandom).
require_relative "glovebox/version"
require_relative "glovebox/errors"
require_relative "glovebox/native"
require_relative "glovebox/setup"
require_relative "glovebox/value"
require_relative "glovebox/client"
require_relative "glovebox/sandbox"
require_relative "glovebox/code_mode"
require_relative "glovebox/box"
