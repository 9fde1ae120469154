# frozen_string_literal: true

require "digest"

module Glovebox
  # security_box's name for a bad setting: the same class as ConfigError.
  InvalidConfiguration = ConfigError

  # An immutable sandbox configuration, security_box's Configuration:
  # limits, mounts, the guest's environment and host RPC handlers, built
  # once (Profile.build, or a registered profile: Glovebox.register) and
  # derived without change (#with). Each setting has glovebox's name and
  # security_box's:
  #
  # | glovebox | security_box | unit |
  # |---|---|---|
  # | timeout | timeout_ms | seconds / milliseconds of wall clock |
  # | fuel | fuel, or fuel_ms | fuel units (about one wasm instruction) / milliseconds of compute (FUEL_PER_MS) |
  # | memory | memory_size | the guest's whole linear memory (at least Exposure::MEMORY_FLOOR) / bytes beyond the booted guest (MEMORY_FLOOR + memory_size) |
  # | output | stdout_limit | bytes of stdout kept |
  # | stderr | stderr_limit | bytes of stderr kept |
  # | tool_calls, tool_time | (1000 calls) | count / seconds inside host tools, per eval |
  # | env | env | the guest's whole ENV |
  # | mounts | mounts | [{host:, guest:, mode: :read_only or :read_write}] or [{host:, guest:, writable:}] |
  # | rpcs | rpcs | {"name" => ->(args) { ... }}: SB.call("name", ...) in the guest |
  #
  # epoch_interval_ms: is accepted and kept (it is in the fingerprint)
  # but changes nothing: glovebox's deadline ticks every 10 ms.
  # image_path: is refused: the image is the process's
  # (Glovebox::Native.image, $GLOVEBOX_IMAGE), not a profile's. A setting
  # given in both spellings, fuel with fuel_ms, or any other key raises
  # ConfigError naming it. nil leaves a setting to Glovebox.config and
  # then glovebox's defaults (10 s, no fuel, 512 MiB, 1 MiB stdout,
  # 64 KiB stderr).
  class Profile
    # Fuel per millisecond of guest compute for fuel_ms: 1e7. A
    # 1M-iteration Ruby while loop takes 5.1e8 fuel (glovebox.Limits.Fuel)
    # and 45 ms on the development machine at rest (BRIEF: the spike), so
    # about 1.1e7 a millisecond; measured under load 13 on 2 cores, 5.8e6.
    # Unlike security_box's, no boot allowance is added: a glovebox eval
    # starts from a booted snapshot and burns no fuel to boot.
    FUEL_PER_MS = 10_000_000

    # The settings a Profile holds, glovebox's names.
    SETTINGS = %i[timeout fuel fuel_ms memory output stderr tool_calls tool_time env mounts rpcs epoch_interval_ms].freeze
    # security_box's spellings => [glovebox's setting, conversion].
    SPELLINGS = {
      timeout_ms: [:timeout, ->(v) { v && v / 1000.0 }],
      memory_size: [:memory, ->(v) { v && Exposure::MEMORY_FLOOR + v }],
      stdout_limit: [:output, ->(v) { v }],
      stderr_limit: [:stderr, ->(v) { v }],
    }.freeze
    # The most mounts one profile may have (glovebox.MaxMounts).
    MAX_MOUNTS = 16

    attr_reader(*SETTINGS)
    # The name it was registered under (a Symbol), or nil.
    attr_reader :name

    # A Profile from settings in either spelling (the table above).
    # Raises ConfigError naming a bad one.
    def self.build(**settings) = new(normalize(settings, "Configuration.build"))

    # @private settings (either spelling) as glovebox's names, each
    # checked; where names the call for messages.
    def self.normalize(settings, where)
      out = {}
      settings.each do |key, v|
        key = key.to_sym
        if key == :image_path
          raise ConfigError, "#{where}: image_path: the Ruby image is the process's, not a profile's: set " \
                             "Glovebox::Native.image or $GLOVEBOX_IMAGE before the first eval"
        end
        canon, conv = SPELLINGS[key]
        canon ||= key
        raise ConfigError, "#{where}: unknown setting #{key}: (settings: #{(SETTINGS + SPELLINGS.keys).join(", ")})" unless SETTINGS.include?(canon)
        if out.key?(canon) && !out[canon].nil? && !v.nil?
          raise ConfigError, "#{where}: #{canon} is given twice (as #{canon}: and as #{SPELLINGS.key([canon, conv]) || canon}:); give one"
        end

        out[canon] = check(canon, conv ? conv.call(check_number(key, v, where)) : v, where, key)
      end
      raise ConfigError, "#{where}: fuel: and fuel_ms: are mutually exclusive; give one" if out[:fuel] && out[:fuel_ms]

      out
    end

    # @private
    def self.check_number(key, v, where)
      return v if v.nil? || (v.is_a?(Numeric) && v.finite? && v.positive?)

      raise ConfigError, "#{where}: #{key}: #{v.inspect} is not a positive number"
    end

    # @private One setting, checked (limits by Sandbox's rules when a
    # Sandbox is made; here their types), frozen.
    def self.check(canon, v, where, key)
      return nil if v.nil?

      case canon
      when :env then Sandbox.env_for(v, nil, setting: "#{where}: #{key}:").freeze
      when :mounts
        list = Sandbox.normalize_mounts(v, "#{where}: #{key}:", check_host: false)
        raise ConfigError, "#{where}: #{key}: #{list.size} mounts, more than #{MAX_MOUNTS}" if list.size > MAX_MOUNTS

        list.map(&:freeze).freeze
      when :rpcs then check_rpcs(v, "#{where}: #{key}:")
      when :epoch_interval_ms, :fuel_ms, :timeout, :tool_time then check_number(key, v, where)
      else
        raise ConfigError, "#{where}: #{key}: #{v.inspect} is not a positive Integer" unless v.is_a?(Integer) && v >= 0

        v
      end
    end

    # @private rpcs as a frozen Hash of String => callable.
    def self.check_rpcs(rpcs, setting)
      raise ConfigError, "#{setting} a Hash of name => callable, not #{rpcs.class}" unless rpcs.is_a?(Hash)

      rpcs.each_with_object({}) do |(k, fn), h|
        raise ConfigError, "#{setting} #{k.inspect}: names are non-empty Strings" if k.to_s.empty?
        raise ConfigError, "#{setting} #{k}: #{fn.class} does not respond to call" unless fn.respond_to?(:call)

        h[k.to_s] = fn
      end.freeze
    end

    # A stable identity: the SHA-256 (hex) of the settings but the RPC
    # handlers (host-only state, as security_box excludes them): equal
    # settings, equal fingerprint, in any process.
    # settings: glovebox's names (Profile.normalize's output).
    def initialize(settings = {}, name: nil)
      SETTINGS.each { |k| instance_variable_set(:"@#{k}", settings[k]) }
      @name = name
      h = to_settings.except(:rpcs).compact
      h[:env] = h[:env].sort.to_h if h[:env]
      @fingerprint = Digest::SHA256.hexdigest(JSON.generate(h.sort.to_h))
      freeze
    end

    # A Profile with these settings changed (either spelling; nil
    # clears one), this one unchanged. fuel: on a fuel_ms profile (or the
    # reverse) raises unless the other is cleared too: with(fuel_ms: nil,
    # fuel: 5_000_000).
    def with(**settings)
      changes = Profile.normalize(settings, "with")
      merged = to_settings.merge(changes)
      if merged[:fuel] && merged[:fuel_ms]
        raise ConfigError, "with: fuel: and fuel_ms: are mutually exclusive; clear the profile's #{changes.key?(:fuel) ? "fuel_ms" : "fuel"} " \
                           "(with(#{changes.key?(:fuel) ? "fuel_ms" : "fuel"}: nil, ...))"
      end
      Profile.new(merged)
    end

    # The fuel an eval gets: fuel, or fuel_ms * FUEL_PER_MS; nil: none.
    def effective_fuel = fuel || (fuel_ms && (fuel_ms * FUEL_PER_MS).round)

    # security_box's readers.
    def timeout_ms = timeout && (timeout * 1000).round
    def memory_size = memory && memory - Exposure::MEMORY_FLOOR
    def stdout_limit = output
    def stderr_limit = stderr

    # The limits a Sandbox made from it takes (glovebox's names, set ones
    # only).
    def limits
      { timeout: timeout, fuel: effective_fuel, memory: memory, output: output, stderr: stderr,
        tool_calls: tool_calls, tool_time: tool_time }.compact
    end

    # Every setting (glovebox's names; nil for those not set).
    def to_h = to_settings

    # The fingerprint (see new): 64 hex digits.
    attr_reader :fingerprint

    def ==(other) = other.is_a?(Profile) && other.to_settings == to_settings

    def inspect = "#<Glovebox::Profile#{name ? " #{name.inspect}" : ""} #{to_settings.compact.except(:rpcs).inspect}>"

    # @private
    def to_settings = SETTINGS.to_h { [_1, instance_variable_get(:"@#{_1}")] }

    # @private A copy named name.
    def named(name) = Profile.new(to_settings, name: name)

    # Builds a profile with security_box's block DSL (Glovebox.register):
    # each setting is a method taking its value (c.fuel 2_000_000,
    # c.timeout_ms 500), plus mount/mount_rw ("./data" => "/data", host
    # paths expanded now) and rpc ("name" => ->(args) { ... }, or
    # rpc("name") { |args| ... }).
    class Builder
      def initialize(base)
        @s = base.to_settings
        @set = {}
      end

      (SETTINGS - %i[mounts rpcs env] + SPELLINGS.keys).each do |key|
        define_method(key) do |value|
          canon = SPELLINGS.dig(key, 0) || key
          if @set[canon] && @set[canon] != key
            raise ConfigError, "register: #{canon} is set twice in the block (as #{@set[canon]} and #{key}); set one"
          end
          if %i[fuel fuel_ms].include?(canon) && @set[canon == :fuel ? :fuel_ms : :fuel]
            raise ConfigError, "register: fuel and fuel_ms are mutually exclusive in one profile; set one"
          end

          @set[canon] = key
          @s.merge!(Profile.normalize({ key => value }, "register"))
          @s[canon == :fuel ? :fuel_ms : :fuel] = nil if %i[fuel fuel_ms].include?(canon) # a derived profile switches
          self
        end
      end

      # The guest's whole ENV, replacing the base profile's.
      def env(vars)
        @s.merge!(Profile.normalize({ env: vars }, "register"))
        self
      end

      # A read-only mount: mount "./data" => "/data" (the host path
      # expanded now), or mount(host:, guest:, description:).
      def mount(pair = nil, **opts) = add_mount(pair, opts, false)

      # A writable mount (mount_rw "./state" => "/state").
      def mount_rw(pair = nil, **opts) = add_mount(pair, opts, true)

      # Host RPC handlers: rpc "name" => ->(args) { ... } (several at
      # once), or rpc("name") { |args| ... }.
      def rpc(pairs = nil, &block)
        pairs = { pairs => block } if block
        @s[:rpcs] = (@s[:rpcs] || {}).merge(Profile.check_rpcs(pairs, "register: rpc")).freeze
        self
      end

      # @private
      def settings
        raise ConfigError, "register: fuel and fuel_ms are mutually exclusive; set one" if @s[:fuel] && @s[:fuel_ms]

        @s
      end

      private

      def add_mount(pair, opts, writable)
        # "./data" => "/data" arrives as a keyword (its key a String).
        pairs = (pair || {}).merge(opts.reject { |k, _| k.is_a?(Symbol) })
        named = opts.select { |k, _| k.is_a?(Symbol) }
        list = pairs.map { |h, g| { host: h, guest: g, writable: writable } }
        list << named.merge(writable: writable) unless named.empty?
        mounts = Sandbox.normalize_mounts(list, "register: #{writable ? "mount_rw" : "mount"}", check_host: false)
        all = (@s[:mounts] || []) + mounts
        raise ConfigError, "register: #{all.size} mounts, more than #{MAX_MOUNTS}" if all.size > MAX_MOUNTS

        @s[:mounts] = Sandbox.normalize_mounts(all, "register: mounts", check_host: false).map(&:freeze).freeze
        self
      end
    end
  end

  # security_box's spelling of Profile.build: Glovebox::Configuration is
  # also the app-wide defaults (Glovebox.configure), whose instances are
  # mutable; Configuration.build makes an immutable Profile.
  class Configuration
    def self.build(**settings) = Profile.build(**settings)
  end

  # A bounded set of Sandboxes of one profile (Glovebox.pool), for an app
  # that wants a cap on its evals in flight and their figures. glovebox's
  # child already runs evals in parallel (each thread on a socket of its
  # own), so a pool is not needed for parallelism: what it adds is the
  # cap (a caller waits while size evals run), Sandbox objects reused
  # (their config registered with the child once) and metrics.
  class Pool
    attr_reader :size, :profile

    def initialize(profile, size)
      raise ConfigError, "pool: size: #{size.inspect} is not a positive Integer" unless size.is_a?(Integer) && size.positive?

      @profile = profile
      @size = size
      @idle = []
      @mutex = Mutex.new
      @cond = ConditionVariable.new
      @created = @evals = @checkouts = @in_use = 0
      @total = 0.0
      @closed = false
    end

    # Yields a Sandbox of the pool (waiting while size are out) and takes
    # it back after the block.
    def checkout
      sb = take
      begin
        yield sb
      ensure
        give(sb)
      end
    end

    # Runs code on one of the pool's Sandboxes (options as Sandbox#eval's)
    # and returns its Result.
    def eval(code, **opts, &on_output)
      checkout do |sb|
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        begin
          sb.eval(code, **opts, &on_output)
        ensure
          ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000
          @mutex.synchronize do
            @evals += 1
            @total += ms
          end
        end
      end
    end

    # {size:, created:, evals:, total_ms:, avg_ms:, in_use:, checkouts:}:
    # Sandboxes made, evals run through #eval and their wall-clock
    # milliseconds (waiting for a Sandbox not counted).
    def metrics
      @mutex.synchronize do
        { size: @size, created: @created, evals: @evals, total_ms: @total.round(3),
          avg_ms: @evals.zero? ? 0.0 : (@total / @evals).round(3), in_use: @in_use, checkouts: @checkouts }
      end
    end

    # Drops the idle Sandboxes and refuses further use (Glovebox::Error);
    # Sandboxes out at the time finish what they run.
    def shutdown
      @mutex.synchronize do
        @closed = true
        @idle.clear
        @cond.broadcast
      end
      nil
    end

    def closed? = @closed

    private

    def take
      @mutex.synchronize do
        loop do
          raise Error, "glovebox pool: shut down" if @closed

          @checkouts += 1 if @idle.any? || @in_use < @size
          if (sb = @idle.pop)
            @in_use += 1
            return sb
          end
          if @in_use < @size
            @in_use += 1
            @created += 1
            break
          end
          @cond.wait(@mutex)
        end
      end
      Glovebox.spawn(@profile)
    rescue StandardError
      @mutex.synchronize do
        @in_use -= 1
        @cond.signal
      end
      raise
    end

    def give(sb)
      @mutex.synchronize do
        @in_use -= 1
        @idle.push(sb) unless @closed
        @cond.signal
      end
    end
  end

  @profiles = {}
  @profiles_mutex = Mutex.new

  class << self
    # Registers an immutable profile under name (a Symbol or String),
    # from the settings given and the block (security_box's DSL:
    # Profile::Builder), derived from the profile named from: when
    # given. Returns it. Raises ConfigError (InvalidConfiguration) for a
    # name registered already, an unknown from:, or a bad setting.
    def register(name, from: nil, **settings)
      name = profile_name(name)
      base = from ? profile(from) : Profile.new
      base = base.with(**settings) unless settings.empty?
      if block_given?
        b = Profile::Builder.new(base)
        yield b
        base = Profile.new(b.settings)
      end
      prof = base.named(name)
      @profiles_mutex.synchronize do
        raise ConfigError, "register: a profile named #{name.inspect} exists already; profiles are immutable" if @profiles.key?(name)

        @profiles[name] = prof
      end
    end

    # The profile registered under name; raises ConfigError naming it and
    # the registered ones when there is none.
    def profile(name)
      name = profile_name(name)
      @profiles_mutex.synchronize { @profiles[name] } or
        raise ConfigError, "no profile named #{name.inspect} (registered: #{profiles.empty? ? "none" : profiles.join(", ")}); Glovebox.register it first"
    end

    # The registered profiles' names (Symbols).
    def profiles = @profiles_mutex.synchronize { @profiles.keys }

    # @private Forgets every registered profile (tests).
    def reset_profiles! = @profiles_mutex.synchronize { @profiles.clear }

    # A Sandbox from a profile: a registered name, a Profile
    # (Configuration.build), or nil for the default settings; overrides
    # (either spelling) derive from it without changing it. A program
    # that names SB has it (SB.call reaches the profile's rpcs; with none,
    # a rescuable SB::UnknownTool), and its Result's stdout and stderr
    # stop at their limits (no truncation marker; the *_truncated flags
    # say so). Raises ConfigError as Profile and Sandbox do.
    def spawn(from = nil, **overrides)
      base = case from
             when nil then Profile.new
             when Profile then from
             else profile(from)
             end
      base = base.with(**overrides) unless overrides.empty?
      Sandbox.new(base).guest_code!(sb: true, bare_output: true)
    end

    # Runs code once in a fresh VM with the default settings and
    # options (either spelling: timeout_ms:, fuel:, memory_size:,
    # stdout_limit:, mounts:, env:, rpcs:, ...; from: a registered
    # profile's name, or a Profile, to start from) and returns its
    # Result: status (== :ok and "ok"), value, stdout, stderr, error
    # (error["class"], ...), fuel_used, duration_ms, rpcs. stdin: a
    # String; args: ARGV.
    def eval(code, stdin: nil, args: nil, from: nil, **options)
      spawn(from, **options).eval(code, stdin: stdin, args: args)
    end

    # Prepares what the first eval would (starts the child, which
    # compiles the image once per machine and loads it, and with fuel:
    # the metered copy too) so that later evals start in milliseconds.
    # Takes eval's options; safe to call more than once. Returns true.
    # Raises ChildError when the child cannot start.
    def warmup(from: nil, **options)
      r = spawn(from, **options).eval("nil")
      raise Error, "glovebox warmup: the eval ended #{r.status}: #{r.error}" unless r.ok?

      true
    end

    # A Pool of size Sandboxes of a profile (a registered name, a
    # Profile, or nil), overrides as spawn's.
    def pool(from = nil, size:, **overrides)
      base = from.is_a?(Profile) || from.nil? ? (from || Profile.new) : profile(from)
      Pool.new(overrides.empty? ? base : base.with(**overrides), size)
    end

    # security_box's RactorPool, which it needs to run wasm in parallel
    # inside one process: glovebox's evals already run in parallel in the
    # child (each thread on a socket of its own), so this is #pool.
    alias ractor_pool pool

    private

    def profile_name(name)
      raise ConfigError, "a profile's name is a Symbol or String, not #{name.inspect}" unless name.is_a?(Symbol) || name.is_a?(String)

      name.to_sym
    end
  end
end
