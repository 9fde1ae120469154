package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

func mcpCmd() *cobra.Command {
	var (
		sb          sandboxFlags
		addr, token string
		origins     []string
		ap          approveFlags
		idle        time.Duration
		maxConc     int
		maxSess     int
		maxHTTPSess int
		programs    string
		tasks       mcpserver.TaskOptions
		st          stateFlags
		stateDir    string
		stateTTL    time.Duration
		stateBytes  string
		clientBytes string
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox to MCP clients (stdio, or Streamable HTTP with --http)",
		Long: `Serve the sandbox as a Model Context Protocol server. Its tools: run_ruby
(a fresh VM per call), ruby_session (state kept for the calling MCP session)
and ruby_session_reset. Mounts are offered as read-only resources.
--programs DIR adds vetted Ruby programs as tools, prompts or resources.
It speaks MCP 2026-07-28 (stateless) and 2025-11-25 and older.

By default it speaks MCP over standard input and output, as MCP clients
start it. --http 127.0.0.1:PORT serves Streamable HTTP at /mcp instead,
bound to loopback unless told otherwise; a non-loopback address needs a
bearer token (--token, or $` + mcpserver.EnvToken + `).

The sandbox flags are eval's (limits, --mount, --profile, --http-allow).
--approve TOOL makes every call of TOOL wait for a person's approval,
asked through the client (MCP elicitation during the call under
2025-11-25; an input_required result under 2026-07-28, answered by the
client's retry in whichever process receives it); a client that cannot
ask gets the call denied, and the program sees Glovebox::ToolDenied.
Programs can ask the client too (mcp_ask: elicitation, sampling by the
client's own model, roots) and report progress (mcp_progress), and so
can bound MCP servers (--mcp-server, --mcp-url): their elicitation goes
to the client the same way, unless --mcp-elicit says otherwise.

At 2026-07-28 a paused program and a ruby_session are sealed states the
client carries (requestState, the session handle); processes behind one
address share --state-key (or $` + envStateKey + `) and --state-dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			sb.mcp.forward = mcpserver.ForwardElicit // a bound server's questions go to this server's client
			cfg, err := sb.config(cmd.Flags())
			if err != nil {
				return err
			}
			if cfg.Tools == nil {
				cfg.Tools = &glovebox.Toolset{}
			}
			if err := mcpserver.ClientTools(cfg.Tools); err != nil {
				return err
			}
			if err := ap.apply(&cfg, mcpserver.Approve); err != nil {
				return err
			}
			secret, err := st.secret()
			if err != nil {
				return err
			}
			if cfg.StateKeys, err = st.keyring(); err != nil {
				return err
			}
			if stateDir == "" {
				dir, err := glovebox.DefaultCacheDir()
				if err != nil {
					return err
				}
				stateDir = filepath.Join(dir, "mcp-states")
			}
			if token == "" {
				token = os.Getenv(mcpserver.EnvToken)
			}
			if addr != "" && !mcpserver.IsLoopback(addr) && token == "" {
				return usageError{fmt.Errorf("--http %s is not a loopback address: set --token or $%s", addr, mcpserver.EnvToken)}
			}
			var maxState, maxClientState int64
			for _, f := range []struct {
				flag, val string
				dst       *int64
			}{{"--max-state-bytes", stateBytes, &maxState}, {"--max-client-state-bytes", clientBytes, &maxClientState}} {
				if f.val == "" {
					continue
				}
				n, err := parseSize(f.flag, f.val, 1<<40)
				if err != nil || n == 0 {
					return usageError{cmp.Or(err, fmt.Errorf("%s %q: more than zero, please (leave it out for the default)", f.flag, f.val))}
				}
				*f.dst = int64(n)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rt, err := newRuntime(ctx, cfg)
			if err != nil {
				return err
			}
			defer rt.Close()
			srv, err := mcpserver.New(mcpserver.Options{Runtime: rt, Servers: mcpNotes(), SessionIdle: idle, MaxSessions: maxSess, MaxConcurrent: maxConc, Version: mcpVersion(), Programs: programs,
				StateKey: secret, StateDir: stateDir, StateTTL: stateTTL, MaxStateBytes: maxState, MaxClientStateBytes: maxClientState, Tasks: tasks})
			if err != nil {
				return err
			}
			defer srv.Close()
			if addr == "" {
				err := srv.RunStdio(ctx)
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			return serveMCPHTTP(ctx, srv, mcpserver.HTTPOptions{Addr: addr, Token: token, AllowedOrigins: origins, MaxSessions: maxHTTPSess})
		},
	}
	sb.register(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&addr, "http", "", "serve Streamable HTTP at http://ADDR/mcp instead of stdio, e.g. 127.0.0.1:8080")
	f.StringVar(&token, "token", "", "bearer token HTTP clients must send (default $"+mcpserver.EnvToken+"; required off loopback)")
	f.StringArrayVar(&origins, "allow-origin", nil, "a browser origin allowed to call the HTTP server, e.g. https://app.example.com (repeatable)")
	ap.register(f)
	f.DurationVar(&idle, "session-idle", 0, "suspend a session's VM after this long without a call, resuming it at the next (freed instead when it keeps a file open; 0: the default, 30m)")
	f.IntVar(&maxConc, "max-concurrent", 0, "programs run at once across all sessions (0: 2 × CPUs)")
	f.IntVar(&maxSess, "max-sessions", 0, "MCP sessions holding a ruby_session VM at once (0: 8)")
	st.register(f)
	f.StringVar(&stateDir, "state-dir", "", "directory for what outlives a request at MCP 2026-07-28: large paused states and ruby_session handles, and the outcome of each continued one (so a replayed request gets it); processes serving one client share it and the --state-key (default: mcp-states in the glovebox cache directory)")
	f.DurationVar(&stateTTL, "state-ttl", 0, fmt.Sprintf("how long an input_required requestState or a ruby_session handle can be used, and its outcome kept; every record in --state-dir is removed once this has passed (0: %v)", mcpserver.DefaultStateTTL))
	f.StringVar(&stateBytes, "max-state-bytes", "", "bytes the records in --state-dir take at most, for all clients and every process sharing it (default 4GiB)")
	f.StringVar(&clientBytes, "max-client-state-bytes", "", "one client's share of --max-state-bytes (a client: the authenticated user, else the HTTP client's address, else the stdio process); past it the client's oldest ruby_session handles are dropped (default: an eighth of --max-state-bytes)")
	f.StringVar(&programs, "programs", "", "a folder of named programs (NAME.rb with NAME.json: kind, description, inputSchema), each served as an MCP tool, prompt or resource that runs it sandboxed with the call's arguments as ARGS")
	f.IntVar(&maxHTTPSess, "max-http-sessions", 0, fmt.Sprintf("MCP sessions open over --http at once; past it the oldest session never used since its initialize is closed (one is anyway after %v), else the least recently used one idle for %v, else the initialize is refused with 503 (0: %d)", mcpserver.DefaultNewSessionGrace, mcpserver.DefaultPressureIdle, mcpserver.DefaultMaxHTTPSessions))
	f.DurationVar(&tasks.TTL, "task-ttl", 0, fmt.Sprintf("keep an ended task's outcome this long for tasks/get (0: %v)", mcpserver.DefaultTaskTTL))
	f.IntVar(&tasks.MaxKept, "max-tasks", 0, fmt.Sprintf("tasks this process keeps, running or ended; the oldest ended go first (0: %d)", mcpserver.DefaultMaxTasks))
	f.IntVar(&tasks.MaxPerClient, "max-client-tasks", 0, fmt.Sprintf("tasks one client has running at once (0: %d)", mcpserver.DefaultMaxTasksPerClient))
	return cmd
}

// serveMCPHTTP serves srv at http://o.Addr/mcp until ctx ends.
func serveMCPHTTP(ctx context.Context, srv *mcpserver.Server, o mcpserver.HTTPOptions) error {
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	o.Addr = ln.Addr().String()
	h, err := srv.HTTPHandler(o)
	if err != nil {
		ln.Close()
		return usageError{err}
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "glovebox mcp: serving http://%s/mcp\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}

func mcpVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
