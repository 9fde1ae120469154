# frozen_string_literal: true

# Rake tasks for an app using glovebox: `require "glovebox/rake"` in a
# Rakefile (or a Rails app's lib/tasks/glovebox.rake) defines
#
#   rake glovebox:setup   # prepare the Ruby images ahead of time
#   rake "glovebox:setup[./data:/data ./out:/out:rw]"   # and a mount layout's snapshots
#
# (Glovebox.setup), for bin/setup, a deploy step or a Dockerfile. The
# optional argument is a mount layout as HOST:GUEST[:rw] items separated
# by spaces, in the sandbox's order.
require "rake"
require "glovebox"

module Glovebox
  # The tasks this file defines; Glovebox::RakeTasks.install defines them
  # again in another Rake application (tests).
  module RakeTasks
    extend Rake::DSL

    # The mounts a task argument names: "HOST:GUEST[:rw] ..." (spaces
    # between mounts) as Glovebox.setup takes them.
    def self.mounts(spec)
      spec.to_s.split.map do |item|
        host, guest, mode = item.split(":", 3)
        raise ArgumentError, "glovebox:setup[#{spec}]: #{item.inspect} is not HOST:GUEST or HOST:GUEST:rw" if
          host.to_s.empty? || guest.to_s.empty? || !["rw", "ro", nil].include?(mode)

        { host: host, guest: guest, writable: mode == "rw" }
      end
    end

    def self.install
      namespace :glovebox do
        desc "Prepare glovebox's Ruby images (plain and fuel-metered) and their snapshots, " \
             "and those of a mount layout given as HOST:GUEST[:rw] items, so no eval waits for one"
        task :setup, [:mounts] do |_t, args|
          # Progress to the app's logger if it set one, else the terminal
          # (the quiet default logger would hide it).
          Glovebox.setup(log: Glovebox.config.logger_set? ? Glovebox.logger : $stderr,
                         mounts: RakeTasks.mounts(args[:mounts]))
        end
      end
    end
  end
end

Glovebox::RakeTasks.install
