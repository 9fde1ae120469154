# frozen_string_literal: true

module Glovebox
  # App-wide defaults (Glovebox.configure, or Enclave's accessor style
  # Glovebox.timeout = 5). Read when a Sandbox or Box is made; the
  # options given to it win.
  #
  #   # config/initializers/glovebox.rb
  #   Glovebox.configure do |c|
  #     c.timeout = 5                         # seconds per eval
  #     c.tool_calls = 50
  #     c.logger = Rails.logger
  #     c.executor = ENV["GLOVEBOX_URL"]      # set: sandboxes run off-host; nil: embedded
  #   end
  class Configuration
    # The limit defaults, as Sandbox.new takes them (seconds, units,
    # bytes, counts); nil takes glovebox's own default.
    LIMIT_KEYS = %i[timeout fuel memory output stderr tool_calls tool_time].freeze

    attr_accessor(*LIMIT_KEYS)
    # executor:, token:, ca_file: for every Sandbox and Box made without
    # its own: with an executor URL set, they run on it (remote mode);
    # nil (the default) runs them embedded.
    attr_accessor :executor, :token, :ca_file
    # The key that seals paused evals (Sandbox.new(suspend: ...)) in
    # embedded mode: 64 hex digits (`openssl rand -hex 32`); every
    # process that continues an eval needs the same one. Default:
    # $GLOVEBOX_STATE_KEY; without one, suspend: and continue are
    # refused. Best set at boot; set later, it reaches a running child
    # at the next eval (a session opened before keeps the key it opened
    # with).
    attr_accessor :state_key
    # The directory recording which paused evals were continued, so each
    # is answered once (processes of one host sharing it): a String
    # path; nil (the default) is the cache directory's
    # embedded-continued (see #state_dir).
    attr_writer :state_dir
    # The cache directory the child uses (compiled image, snapshots);
    # default: $GLOVEBOX_CACHE_DIR, else $XDG_CACHE_HOME/glovebox, else
    # ~/.cache/glovebox.
    attr_accessor :cache_dir
    # More variables for the child's environment ({"NAME" => "value"},
    # e.g. a proxy for npm): it gets nothing else of ENV but
    # Child::ENV_PASSED.
    attr_accessor :child_env
    # The app's eval profiles for embedded sandboxes, by name:
    # {"analytics" => {mounts: [...], http: HttpTool, mcp: [...]}}, so
    # Sandbox.new(profile: "analytics") runs the same code embedded (with
    # these) and through an executor (with its operator's profile of that
    # name). Default: none.
    attr_accessor :eval_profiles
    attr_writer :logger

    def initialize
      @state_key = ENV.fetch("GLOVEBOX_STATE_KEY", nil)
      @child_env = {}
      @eval_profiles = {}
    end

    # Where the gem's own lines and the child's go (a Logger, e.g.
    # Rails.logger; nil restores the default). Default: a quiet Logger
    # on $stderr, made when the first line comes, that writes warnings
    # and errors only ("glovebox: warning: ..."), so an app that sets
    # none sees nothing while all is well: set one (or raise the
    # default's level, Glovebox.logger.level = :info) to see the child
    # start, a session idle out, an image being compiled.
    def logger = @logger || (@default_logger ||= Configuration.default_logger)

    # True when a logger was set (#logger is not the quiet default).
    def logger_set? = !@logger.nil?

    # @private The default logger (see #logger).
    def self.default_logger
      require "logger"
      Logger.new($stderr, level: Logger::WARN, progname: "glovebox", formatter: DEFAULT_FORMAT)
    end

    # The default logger's lines: "glovebox: warning: MESSAGE" (a
    # message that names glovebox already is not prefixed twice).
    DEFAULT_FORMAT = lambda do |severity, _time, progname, msg|
      text = msg.is_a?(Exception) ? "#{msg.message} (#{msg.class})" : msg.to_s
      label = { "WARN" => "warning", "ANY" => nil }.fetch(severity, severity.downcase)
      "#{[progname, label].compact.join(": ")}: #{text.delete_prefix("#{progname}: ")}\n"
    end

    # The claims directory in use: the one set, else
    # "embedded-continued" in the cache directory (Child.cache_dir:
    # Glovebox.cache_dir, $GLOVEBOX_CACHE_DIR, $XDG_CACHE_HOME/glovebox
    # or ~/.cache/glovebox).
    def state_dir
      d = @state_dir.to_s
      d.empty? ? File.join(Child.cache_dir, "embedded-continued") : d
    end

    # @private The state_dir set (nil: the default), as the child is
    # told it.
    def state_dir_setting = @state_dir

    # The limit defaults that are set (Hash of Symbol => value).
    def limits = LIMIT_KEYS.to_h { [_1, public_send(_1)] }.compact
  end

  class << self
    # The app-wide Configuration.
    def config = @config ||= Configuration.new

    # Yields config to set app-wide defaults; returns it.
    def configure
      yield config
      config
    end

    (Configuration::LIMIT_KEYS + %i[executor token ca_file state_key state_dir cache_dir child_env eval_profiles logger]).each do |k|
      define_method(k) { config.public_send(k) }
      define_method(:"#{k}=") { |v| config.public_send(:"#{k}=", v) }
    end

    # @private Forwards one of the child's log lines (slog's JSON:
    # "level", "msg" and attributes) to the logger, at its level.
    def log_child_line(line)
      rec = begin
        JSON.parse(line)
      rescue JSON::ParserError
        nil
      end
      log = config.logger
      return log.warn("glovebox child: #{line}") unless rec.is_a?(Hash)

      msg = rec.delete("msg").to_s.delete_prefix("glovebox: ")
      level = rec.delete("level").to_s
      rec.delete("time")
      text = ([msg] + rec.map { |k, v| "#{k}=#{v}" }).join(" ")
      case level
      when "ERROR" then log.error(text)
      when "WARN" then log.warn(text)
      when "DEBUG" then log.debug(text)
      else log.info(text)
      end
    rescue StandardError
      nil # a logger that fails does not stop the child's log
    end
  end
end
