# frozen_string_literal: true

# Rake tasks for an app using glovebox: `require "glovebox/rake"` in a
# Rakefile (or a Rails app's lib/tasks/glovebox.rake) defines
#
#   rake glovebox:setup   # compile the Ruby images ahead of time
#
# (Glovebox.setup), for bin/setup, a deploy step or a Dockerfile.
require "rake"
require "glovebox"

module Glovebox
  # The tasks this file defines; Glovebox::RakeTasks.install defines them
  # again in another Rake application (tests).
  module RakeTasks
    extend Rake::DSL

    def self.install
      namespace :glovebox do
        desc "Compile glovebox's Ruby images (plain and fuel-metered) and their snapshots, so no eval waits for one"
        task :setup do
          # Progress to the app's logger if it set one, else the terminal
          # (the quiet default logger would hide it).
          Glovebox.setup(log: Glovebox.config.logger_set? ? Glovebox.logger : $stderr)
        end
      end
    end
  end
end

Glovebox::RakeTasks.install
