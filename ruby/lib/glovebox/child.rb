# frozen_string_literal: true

require "json"
require "socket"

module Glovebox
  # The embedded child failed: it could not be started (the binary is
  # missing or not executable, or it exited before answering), it died
  # while it served this process (killed, crashed), or it broke the
  # protocol. +status+ is its Process::Status when it exited (else nil);
  # +stderr+ the last lines it wrote (String). Nothing is retried by
  # itself; the next Sandbox starts a new child.
  class ChildError < Error
    attr_reader :status, :stderr

    def initialize(message, status: nil, stderr: "")
      @status = status
      @stderr = stderr.to_s
      tail = @stderr.empty? ? "" : "; its last output: #{@stderr}"
      super("glovebox child: #{message}#{tail}")
    end
  end

  # The glovebox process this Ruby process starts for itself: the
  # embedded default (docs/embedded.md). It is started at the first eval
  # (a Sandbox that never evaluates starts none), shared by every
  # Sandbox and Box of the process, started anew in a forked process
  # (Puma and Unicorn workers, Spring, Sidekiq) at its first eval there,
  # started anew after it died, and stopped at exit.
  #
  # It inherits no descriptor but its control socket (descriptor 3) and
  # a pipe for its log (stderr), and no environment but ENV_PASSED, the
  # cache directory, the Ruby image and Glovebox.child_env (see #env).
  # Each Ruby thread talks to it on a socket of its own, taken from a
  # pool for one request and given back (a Channel), so no thread waits
  # on another's eval and nothing is handed between threads.
  class Child
    # The embedded protocol this gem speaks; the binary of the same
    # release speaks it too, and refuses another.
    PROTOCOL = 1
    # Variables passed through from ENV when set: PATH (the child finds
    # bwrap, runsc and npm on it), HOME (npm's cache, when the image is
    # fetched), LANG and TMPDIR (where a VM's scratch directory goes when
    # /dev/shm is not writable).
    ENV_PASSED = %w[PATH HOME LANG TMPDIR].freeze
    # Idle channels kept for reuse; more are closed when given back.
    MAX_IDLE = 16
    # Seconds to wait for the child's hello answer.
    HELLO_TIMEOUT = 30
    # Lines of the child's stderr kept for error messages.
    TAIL_LINES = 12
    # Frame types (docs/embedded.md).
    REQUEST = "Q".ord
    ANSWER = "A".ord
    REPLY = "R".ord
    REFUSAL = "X".ord
    CALL = "C".ord
    STDOUT = "O".ord
    STDERR = "E".ord
    # The largest frame either side sends or takes (its length field:
    # the type byte and the payload), 64 MiB: embed's maxFrame. The child
    # closes a channel that sends a larger one.
    MAX_FRAME = 64 << 20

    @mutex = Mutex.new
    @current = nil

    class << self
      # The process's child, started now if there is none yet, if this
      # process was forked from the one that started it, or if it died.
      # Raises ChildError when it cannot start.
      def current
        c = @current
        return c if c&.usable?

        @mutex.synchronize do
          c = @current
          unless c&.usable?
            c&.discard
            @current = c = new
          end
          c
        end
      end

      # The running child, or nil (none was started, or it was discarded).
      def running = @current&.usable? ? @current : nil

      # Stops the child of this process (at exit; also for tests).
      def stop
        c = @current
        @current = nil
        c&.stop
      end

      # @private Called in a forked process: the child and its sockets
      # are the parent's. Drops them without touching them (closing this
      # process's copies of the descriptors leaves the parent's open), so
      # the next eval here starts a child of its own.
      def after_fork
        @mutex = Mutex.new
        c = @current
        @current = nil
        c&.abandon
      end
    end

    attr_reader :pid, :version, :info_at_start

    # Starts the child and exchanges hellos. Raises ChildError.
    def initialize
      @owner = Process.pid
      @pool = []
      @open = {}.compare_by_identity # every channel not closed: pooled, or held by a thread
      @pool_mutex = Mutex.new
      @ctl_mutex = Mutex.new
      @sids = {}
      @sid_mutex = Mutex.new
      @key_mutex = Mutex.new
      @tail = []
      @dead = false
      start
    end

    # True while the child serves this process: started here, and not
    # known to have exited (a cheap WNOHANG check).
    def usable?
      return false if @dead || @owner != Process.pid

      if Process.waitpid(@pid, Process::WNOHANG)
        @status = $?
        @dead = true
        return false
      end
      true
    rescue Errno::ECHILD
      @dead = true
      false
    end

    # The environment the child is started with, whole: ENV_PASSED as
    # set, GLOVEBOX_CACHE_DIR (Glovebox.cache_dir, else
    # $GLOVEBOX_CACHE_DIR, else $XDG_CACHE_HOME/glovebox, else
    # ~/.cache/glovebox), GLOVEBOX_IMAGE (Native.image_for(bin), when
    # there is one: never the image packed beside the packed binary,
    # which the binary checks itself) and Glovebox.child_env. bin: the
    # binary to start (default Native.binary).
    def self.env(bin = Native.binary)
      env = ENV_PASSED.to_h { [_1, ENV.fetch(_1, nil)] }.compact
      env["LANG"] ||= "C.UTF-8"
      env["GLOVEBOX_CACHE_DIR"] = cache_dir
      image = Native.image_for(bin)
      env["GLOVEBOX_IMAGE"] = image if image
      env.merge(Glovebox.config.child_env.to_h { |k, v| [k.to_s, v&.to_s] }).compact
    end

    # The cache directory the child uses (see ::env).
    def self.cache_dir
      d = Glovebox.config.cache_dir || ENV.fetch("GLOVEBOX_CACHE_DIR", nil)
      return d.to_s unless d.to_s.empty?

      xdg = ENV.fetch("XDG_CACHE_HOME", nil)
      base = xdg && !xdg.empty? ? xdg : File.join(Dir.home, ".cache")
      File.join(base, "glovebox")
    end

    # Takes a channel for one request and gives it back afterwards; a
    # channel whose exchange did not end cleanly (an exception in the
    # middle of a frame, Thread#raise, Timeout) is closed instead, so a
    # half-read answer never reaches the next request.
    def with_channel
      ch = @pool_mutex.synchronize { @pool.pop } || open_channel
      clean = false
      begin
        r = yield ch
        clean = true
        r
      rescue APIError, RunError
        clean = true # a refusal is a whole answer: the channel is in step
        raise
      ensure
        # A channel with something to read between requests is out of
        # step or closed by the child (which closes one that broke the
        # protocol): never reused, or its next request would find the
        # child "dead" and end every thread's eval.
        if clean && !@dead && ch.idle?
          ch = @pool_mutex.synchronize { @pool.size < MAX_IDLE ? @pool.push(ch) && nil : ch }
        end
        if ch
          @pool_mutex.synchronize { @open.delete(ch) }
          ch.close
        end
      end
    end

    # Sends one request (a Hash) on a channel and returns its answer (a
    # Hash); raises as #read_answer does.
    def request(req)
      with_channel do |ch|
        send_request(ch, JSON.generate(req))
        read_answer(ch)
      end
    end

    # The sid of a sandbox config (its JSON text) in this child,
    # registering it on ch the first time. Raises APIError for a config
    # the child refuses.
    def sid_for(ch, config_json)
      sid = @sids[config_json]
      return sid if sid

      send_request(ch, "{\"op\":\"config\",\"config\":#{config_json}}")
      sid = read_answer(ch)["sid"]
      @sid_mutex.synchronize do
        @sids.clear if @sids.size >= 256
        @sids[config_json] = sid
      end
    end

    # @private Forgets a config the child no longer knows.
    def forget_sid(config_json) = @sid_mutex.synchronize { @sids.delete(config_json) }

    # Reads ch's next frames until the request's answer: returns the
    # decoded Hash, raises for a refusal (#refused), ChildError when the
    # child died or broke the protocol.
    def read_answer(ch)
      loop do
        type, body = read_frame(ch)
        case type
        when REPLY then return JSON.parse(body)
        when REFUSAL then refused(body)
        when STDOUT, STDERR then next
        else protocol_error("a frame of type #{type.chr.inspect} where an answer was due")
        end
      end
    end

    # One frame from ch; ChildError when the child is gone.
    def read_frame(ch)
      ch.read_frame
    rescue EOFError, IOError, SystemCallError => e
      died(e)
    end

    # Sends a request (JSON text) on ch; ChildError when the child is
    # gone.
    def send_request(ch, json)
      ch.send_request(json)
    rescue IOError, SystemCallError => e
      died(e)
    end

    # Raises the error a refusal frame names. For an eval (record:
    # true), what an executor reports as a failed record is one here too:
    # RunError (not_found, session_paused, state_refused) or
    # AlreadyContinued; the rest, and every refusal of another request,
    # is APIError.
    def refused(body, key: nil, record: false)
      err = JSON.parse(body)
      code = err["code"]
      case code
      when "already_continued"
        raise AlreadyContinued, { "key" => key, "state" => "failed", "error" => err }
      when "not_found", "session_paused", "state_refused"
        raise RunError, { "key" => key, "state" => "failed", "error" => err } if record

        raise APIError.new(code, err["message"], from: "glovebox")
      when "protocol_mismatch"
        raise ChildError, err["message"]
      else
        raise APIError.new(code, err["message"], from: "glovebox")
      end
    end

    # A control request (hello, cancel, info) and its answer.
    def control(req)
      @ctl_mutex.synchronize do
        send_request(@ctl, JSON.generate(req))
        read_answer(@ctl)
      end
    rescue EOFError, IOError, SystemCallError => e
      died(e)
    end

    # Sends Glovebox.state_key (and state_dir) to the child when they
    # changed since it started or since the last call: a key set after
    # the first eval reaches the running child (which then registers
    # every sandbox config again, so the next evals can pause; a session
    # opened before keeps the key it opened with). Called before each
    # eval; an unchanged setting costs two identity checks. Raises
    # APIError "bad_request" for a key that is not 64 hex digits (the
    # child keeps the one it had).
    def sync_state_key
      cfg = Glovebox.config
      key = cfg.state_key
      dir = cfg.state_dir_setting
      return if key.equal?(@sent_key) && dir.equal?(@sent_dir)

      @key_mutex.synchronize do
        if key.to_s != @sent_key.to_s || dir.to_s != @sent_dir.to_s
          req = { "op" => "state_key" }
          req["state_key"] = key.to_s unless key.to_s.empty?
          req["state_dir"] = dir.to_s unless dir.to_s.empty? || key.to_s.empty?
          control(req)
          @sids.clear # the child dropped every config
        end
        @sent_key = key
        @sent_dir = dir
      end
    end

    # The child's info: its version, protocol, pid and the OS sandbox
    # boxes run in here ("box": {"backend", "isolation", "trust"}, or
    # {"error"} saying what is missing).
    def info = control({ "op" => "info" })

    # Stops the child: closes its sockets (it cancels what runs and
    # exits), waits up to 2 s, then sends SIGKILL. Idempotent.
    def stop
      return unless @owner == Process.pid && !@stopped

      @stopped = true
      @dead = true
      close_all
      reap(2) || begin
        Process.kill(:KILL, @pid)
        reap(2)
      rescue Errno::ESRCH
        nil
      end
      @log_thread&.join(1)
      close_log
    end

    # @private See Child.after_fork.
    def abandon
      @dead = true
      close_all
      # The channels the parent's other threads held when it forked: no
      # thread here will close them, and each copy would keep a socket
      # of the parent's child open in this process.
      @pool_mutex.synchronize { @open.keys.tap { @open.clear } }.each(&:close)
      close_log
    end

    # @private Drops a child found dead (or one of a forked parent).
    def discard
      @owner == Process.pid ? stop : abandon
    end

    # A line for consoles and logs: pid, version, whether it serves this
    # process.
    def inspect = "#<#{self.class} pid=#{@pid} #{@version || "starting"}#{usable? ? "" : " stopped"}>"

    # The last lines the child wrote to stderr.
    def stderr_tail = @tail_mutex ? @tail_mutex.synchronize { @tail.join("\n") } : ""

    private

    def start
      bin = begin
        Native.binary
      rescue Native::NotFound => e
        raise ChildError, "cannot start: #{e.message}"
      end
      @bin = bin
      ctl, theirs = UNIXSocket.pair(:STREAM)
      err_r, err_w = IO.pipe
      begin
        @pid = Process.spawn(Child.env(bin), bin, "embedded", 3 => theirs, in: File::NULL, out: File::NULL, err: err_w,
                                                           unsetenv_others: true, close_others: true, pgroup: true)
      rescue SystemCallError => e
        [ctl, theirs, err_r, err_w].each(&:close)
        raise ChildError, "cannot start #{bin}: #{e.message}"
      end
      theirs.close
      err_w.close
      @ctl = Channel.new(ctl)
      @err = err_r
      @tail_mutex = Mutex.new
      @log_thread = Thread.new { forward_log(err_r) }
      @log_thread.name = "glovebox-child-log" if @log_thread.respond_to?(:name=)
      @log_thread.report_on_exception = false
      hello
    end

    def hello
      cfg = Glovebox.config
      @sent_key = key = cfg.state_key
      @sent_dir = dir = cfg.state_dir_setting
      req = { "op" => "hello", "protocol" => PROTOCOL, "gem" => VERSION }
      req["state_key"] = key.to_s unless key.to_s.empty?
      req["state_dir"] = dir.to_s unless dir.to_s.empty?
      @ctl.send_request(JSON.generate(req))
      unless @ctl.wait_readable(HELLO_TIMEOUT)
        Process.kill(:KILL, @pid)
        died(nil, "did not answer within #{HELLO_TIMEOUT} s of starting")
      end
      type, body = @ctl.read_frame
      refused(body) if type == REFUSAL
      protocol_error("a frame of type #{type.chr.inspect} where the hello's answer was due") unless type == REPLY
      @info_at_start = JSON.parse(body)
      @version = @info_at_start["version"]
    rescue ChildError, APIError
      stop
      raise
    rescue EOFError, IOError, SystemCallError, JSON::ParserError => e
      died(e, "exited before it answered its hello (is #{@bin} a glovebox binary of this gem's version?)")
    end

    # Raises ChildError saying how the child ended.
    def died(cause, what = nil)
      @dead = true
      status = @status || reap(1)
      @log_thread&.join(0.5)
      close_log
      how = if status&.signaled?
              "killed by signal #{status.termsig} (SIG#{Signal.signame(status.termsig)})"
            elsif status&.exited?
              "exited with status #{status.exitstatus}"
            else
              "stopped answering (#{cause&.class}: #{cause&.message})"
            end
      close_all
      err = ChildError.new("pid #{@pid} #{what || "died while it served this process"}: #{how}", status: status,
                                                                                               stderr: stderr_tail)
      begin
        Glovebox.config.logger.warn(err.message)
      rescue StandardError
        nil
      end
      raise err
    end

    def reap(seconds)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
      loop do
        if Process.waitpid(@pid, Process::WNOHANG)
          return @status = $?
        end
        return nil if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.01
      end
    rescue Errno::ECHILD
      @status
    end

    def close_all
      chans = @pool_mutex.synchronize { @pool.dup.tap { @pool.clear } }
      chans.each(&:close)
      @ctl&.close
    end

    # Closes this process's end of the log pipe (the log thread, if it
    # still reads, stops).
    def close_log
      @err&.close unless @err&.closed?
    rescue IOError
      nil
    end

    def open_channel
      mine, theirs = UNIXSocket.pair(:STREAM)
      frame = Channel.frame(REQUEST, '{"op":"channel"}')
      @ctl_mutex.synchronize { @ctl.io.sendmsg(frame, 0, nil, Socket::AncillaryData.unix_rights(theirs)) }
      ch = Channel.new(mine)
      @pool_mutex.synchronize { @open[ch] = true }
      ch
    rescue IOError, SystemCallError => e
      mine&.close
      died(e)
    ensure
      theirs&.close
    end

    # Forwards the child's log lines (JSON, one a line) to
    # Glovebox.logger and keeps the last ones for error messages.
    def forward_log(io)
      io.each_line do |line|
        line = line.chomp
        next if line.empty?

        @tail_mutex.synchronize do
          @tail << line
          @tail.shift while @tail.size > TAIL_LINES
        end
        Glovebox.log_child_line(line)
      end
    rescue IOError, SystemCallError
      nil
    end

    def protocol_error(what)
      @dead = true
      close_all
      raise ChildError, "broke the embedded protocol: #{what}"
    end
  end

  # One socket to the child, for one request at a time (a thread holds
  # it from Child#with_channel's start to its end). Frames: a 4-byte
  # big-endian length of what follows, a type byte, the payload.
  class Child
    class Channel
      attr_reader :io

      def initialize(io)
        @io = io
        @io.binmode
        @io.sync = true
      end

      # The bytes of one frame.
      def self.frame(type, payload)
        [payload.bytesize + 1, type].pack("NC") << payload.b
      end

      # Sends a request (a JSON String). Raises APIError
      # "request_too_large", sending nothing, for one over MAX_FRAME (the
      # child would close the channel).
      def send_request(json)
        n = json.bytesize + 1
        if n > MAX_FRAME
          raise APIError.new("request_too_large", "the request is #{n} bytes, over the embedded child's " \
                                                  "#{MAX_FRAME}-byte frame (code, stdin and a reply: travel in one)", from: "glovebox")
        end
        @io.write([n, REQUEST].pack("NC"), json)
      end

      # Sends a tool call's answer (a reply frame: EXECUTOR.md's
      # tool-results). Raises ArgumentError, sending nothing, for one
      # over MAX_FRAME (Sandbox answers a larger result with an error).
      def send_answer(id, reply)
        n = id.bytesize + reply.bytesize + 2
        raise ArgumentError, "a tool answer of #{n} bytes, over #{MAX_FRAME}" if n > MAX_FRAME

        @io.write([n, ANSWER].pack("NC"), id, "\n", reply)
      end

      # True when nothing waits to be read (no frame, no end): a channel
      # between requests, in step with the child.
      def idle? = !@io.closed? && IO.select([@io], nil, nil, 0).nil?

      # The next frame: [type (Integer), payload (binary String)].
      # Raises EOFError at the socket's end.
      def read_frame
        head = @io.read(4)
        raise EOFError, "the child closed the channel" if head.nil? || head.bytesize < 4

        n = head.unpack1("N")
        raise IOError, "a frame of #{n} bytes" if n.zero? || n > MAX_FRAME

        body = @io.read(n)
        raise EOFError, "a cut frame" if body.nil? || body.bytesize < n

        [body.getbyte(0), body.byteslice(1, n - 1)]
      end

      # True when a frame (or the socket's end) can be read within
      # seconds.
      def wait_readable(seconds) = !IO.select([@io], nil, nil, seconds).nil?

      def close
        @io.close unless @io.closed?
      rescue IOError
        nil
      end
    end
  end
end
