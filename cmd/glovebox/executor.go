package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/httptool"
)

// executorFile is the executor's configuration file (YAML, strict).
type executorFile struct {
	Tenants    []executor.Tenant `yaml:"tenants"`
	MaxRuns    int               `yaml:"max_runs"`
	MaxOutput  int               `yaml:"max_output"`
	MaxTimeout string            `yaml:"max_timeout"`
	// Caps on a command's limits (bytes; pids): zero means box's defaults.
	MaxMemory      int64 `yaml:"max_memory"`
	MaxPids        int   `yaml:"max_pids"`
	MaxDisk        int64 `yaml:"max_disk"`
	MaxOutputFiles int64 `yaml:"max_output_files"`
	// MinStoreFree is executor.Config's (bytes; zero: 64 MiB).
	MinStoreFree int64 `yaml:"min_store_free"`
	// Egress is the proxy rule base for commands with a network
	// allowlist (httptool's rules; the allowlist comes from the command).
	Egress struct {
		TrustedPrefixes []string `yaml:"trusted_prefixes"`
		AllowIPLiterals bool     `yaml:"allow_ip_literals"`
		Ports           []int    `yaml:"ports"`
	} `yaml:"egress"`
	// EvalWorker is --eval-worker's setting ("" or "bwrap"); the flag wins.
	EvalWorker string `yaml:"eval_worker"`
	// Profiles are the eval profiles (executor_profiles.go), by name.
	Profiles map[string]executorProfile `yaml:"profiles"`
}

func executorCmd() *cobra.Command {
	var listen, configPath, storePath, backend, certFile, keyFile, drain string
	cmd := &cobra.Command{
		Use:   "executor --config FILE --store FILE --tls-cert FILE --tls-key FILE",
		Short: "Serve runs for remote callers over HTTPS (a dedicated sandbox host)",
		Long: `Serve the executor wire contract (EXECUTOR.md) over HTTPS: callers holding a
tenant's bearer token send commands, which run on this host's --backend
(bwrap or gvisor) with their output streamed back. Every request has an
idempotency key recorded in the --store before work starts: a retry
never runs a command twice, and runs in progress when a previous
executor process died are reported as lost.

The store is an SQLite file (one executor), or a PostgreSQL database
shared by a fleet of executors: --store postgres://USER@HOST:5432/DB
(any libpq URL: ?sslmode=verify-full, ?host=/run/postgresql for a Unix
socket). To keep the password off the command line, leave --store out
and put the URL in the environment variable GLOVEBOX_STORE_URL (from a
Kubernetes Secret, say). On PostgreSQL the executors heartbeat; the
runs of one not seen for 30 s are marked lost by the others. With
--evals --state-key FILE (the same key on every executor), sessions and
paused evals are kept in the store too, so any executor on it serves
them, and they survive restarts.

The --config file (YAML) lists the tenants with the SHA-256 of their
tokens (make one with 'glovebox executor token') and their limits:

  tenants:
    - name: app
      token_sha256: 64 hex digits
      max_concurrent_runs: 4    # default 4
      max_queued_runs: 16       # default 16
      max_request_bytes: 8388608
      max_stored_bytes: 268435456  # records kept (24 h); default 256 MiB
  max_runs: 8                   # across tenants; default 8
  max_memory: 536870912         # caps each run's limits; defaults: box's
  max_pids: 128                 #   (512 MiB, 128, 256 MiB of /tmp,
  max_disk: 268435456           #   4 MiB of outputs files)
  max_output_files: 4194304
  min_store_free: 67108864      # below it: new runs store_full, /readyz 503
  egress: {trusted_prefixes: [], allow_ip_literals: false, ports: [80, 443]}
  profiles:                     # eval profiles (--evals): a request names one
    analytics:
      tenants: [app]            # who may name it (others get unknown_profile)
      limits: {timeout: 30s}    # the keys of eval --profile (docs/cli.md)
      mounts: [{host: /srv/data, guest: /data, description: sales CSVs}]
      http: {allow: [api.example.com]}
      mcp_servers: {docs: {url: "https://docs.example.com/mcp", headers: {Authorization: "Bearer $DOCS_TOKEN"}}}

SIGTERM or SIGINT drains: /readyz turns 503, new runs are refused, running
ones get --drain to finish, then are stopped and recorded lost. SIGHUP re-reads the
tenants from --config (rotate a token without dropping runs); the other
settings (profiles included) need a restart. Endpoints besides /v1:
/healthz, /readyz, /metrics (Prometheus).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if storePath == "" {
				storePath = os.Getenv("GLOVEBOX_STORE_URL")
			}
			if missing := missingExecutorFlags(configPath, storePath, certFile, keyFile); missing != "" {
				return usageError{fmt.Errorf("executor: --config, --store, --tls-cert and --tls-key are required; missing: %s", missing)}
			}
			fc, err := readExecutorFile(configPath)
			if err != nil {
				return err
			}
			b, err := executorBackend(backend, fc)
			if err != nil {
				return err
			}
			drainFor, err := parseDuration("--drain", drain)
			if err != nil {
				return usageError{err}
			}
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return fmt.Errorf("executor: TLS certificate: %w", err)
			}
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			if len(fc.Profiles) > 0 && !executorEvalFlags.on {
				return usageError{fmt.Errorf("executor: %s: profiles are eval profiles: start the executor with --evals", configPath)}
			}
			profiles, bindings, err := executorProfiles(context.Background(), fc, configPath, logger)
			if err != nil {
				return err
			}
			defer func() {
				for _, b := range bindings { // the profiles' MCP servers stop with the executor
					b.Close()
				}
			}()
			cfg := executor.Config{Backend: b, Tenants: fc.Tenants, MaxRuns: fc.MaxRuns, MaxOutput: fc.MaxOutput,
				MaxMemory: fc.MaxMemory, MaxPids: fc.MaxPids, MaxDisk: fc.MaxDisk, MaxOutputFiles: fc.MaxOutputFiles,
				MinStoreFree: fc.MinStoreFree, Logger: logger}
			if strings.HasPrefix(storePath, "postgres://") || strings.HasPrefix(storePath, "postgresql://") {
				cfg.StoreURL = storePath
			} else {
				cfg.StorePath = storePath
			}
			if fc.MaxTimeout != "" {
				if cfg.MaxTimeout, err = parseDuration("max_timeout", fc.MaxTimeout); err != nil {
					return usageError{err}
				}
			}
			srv, err := executor.New(cfg)
			if err != nil {
				return err
			}
			if err := enableExecutorEvals(srv, fc.EvalWorker, cfg.StoreURL != "", profiles); err != nil { // executor_evals.go
				srv.Close()
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				srv.Close()
				return err
			}
			hs := &http.Server{
				Handler:           srv.Handler(),
				TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
				ReadHeaderTimeout: 10 * time.Second,
				IdleTimeout:       2 * time.Minute,
				ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
			}
			store := "SQLite " + cfg.StorePath
			if cfg.StoreURL != "" {
				store = "PostgreSQL, shared by the fleet" // not the URL: it may hold a password
			}
			fmt.Fprintf(os.Stderr, "glovebox executor: listening on https://%s (backend %s, store %s)\n", ln.Addr(), b.Posture().Backend, store)
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			served := make(chan error, 1)
			go func() { served <- hs.ServeTLS(ln, "", "") }()
			for serving := true; serving; {
				select {
				case <-hup:
					reloadExecutorTenants(srv, configPath, cfg.Logger)
				case err = <-served:
					serving = false
				case got := <-sig:
					serving = false
					fmt.Fprintf(os.Stderr, "glovebox executor: %v: draining (new runs refused, running ones get up to %v to finish)\n", got, drainFor)
					ctx, cancel := context.WithTimeout(context.Background(), drainFor)
					srv.Drain(ctx)
					cancel()
					ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
					hs.Shutdown(ctx) // the drained streams have sent their records
					cancel()
					err = nil
				}
			}
			if cerr := srv.Close(); err == nil {
				err = cerr
			}
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			if err == nil {
				fmt.Fprintf(os.Stderr, "glovebox executor: stopped\n")
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8443", "address to listen on (host:port)")
	f.StringVar(&configPath, "config", "", "tenants and limits (YAML; see above)")
	f.StringVar(&storePath, "store", "", "the idempotency store: an SQLite file (made when missing), or a postgres:// URL for a fleet sharing PostgreSQL (default: $GLOVEBOX_STORE_URL)")
	f.StringVar(&backend, "backend", "bwrap", "where commands run: bwrap or gvisor")
	f.StringVar(&certFile, "tls-cert", "", "the server certificate (PEM; 'glovebox executor devcert' makes one for localhost)")
	f.StringVar(&keyFile, "tls-key", "", "the certificate's private key (PEM)")
	f.StringVar(&drain, "drain", "30s", "on SIGTERM, how long running commands get to finish")
	addExecutorEvalFlags(f) // executor_evals.go
	cmd.AddCommand(executorDevCertCmd(), executorTokenCmd())
	return cmd
}

// reloadExecutorTenants re-reads the config's tenants on SIGHUP (a token
// rotated, a tenant added); a bad file is logged and changes nothing.
func reloadExecutorTenants(srv *executor.Server, path string, log *slog.Logger) {
	fc, err := readExecutorFile(path)
	if err == nil {
		err = srv.SetTenants(fc.Tenants)
	}
	if err != nil {
		log.Error("SIGHUP: tenants not reloaded", "err", err)
		return
	}
	log.Info("SIGHUP: tenants reloaded", "count", len(fc.Tenants))
}

func readExecutorFile(path string) (*executorFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var fc executorFile
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("executor: %s: %w", path, err)
	}
	return &fc, nil
}

func executorBackend(name string, fc *executorFile) (box.Box, error) {
	switch name {
	case "bwrap", "bubblewrap":
		base := httptool.Config{AllowIPLiterals: fc.Egress.AllowIPLiterals, Ports: fc.Egress.Ports}
		for _, p := range fc.Egress.TrustedPrefixes {
			pf, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, usageError{fmt.Errorf("executor: egress.trusted_prefixes: %v", err)}
			}
			base.TrustedPrefixes = append(base.TrustedPrefixes, pf)
		}
		return bwrap.New(bwrap.Config{Egress: egress.HTTPTool(base)})
	case "gvisor", "runsc":
		return gvisor.New(gvisor.Config{})
	}
	return nil, usageError{fmt.Errorf("executor: unknown --backend %q (bwrap, gvisor)", name)}
}

func executorDevCertCmd() *cobra.Command {
	var out string
	var hosts []string
	cmd := &cobra.Command{
		Use:   "devcert --out DIR",
		Short: "Make a self-signed development certificate (cert.pem, key.pem) for localhost",
		Long: `Write DIR/cert.pem and DIR/key.pem: a self-signed ECDSA P-256 certificate,
valid 30 days, for localhost, 127.0.0.1 and ::1 (or the --host names). Give
cert.pem to clients as their root. For development only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageError{errors.New("devcert: --out DIR is required")}
			}
			certPEM, keyPEM, err := executor.DevCert(hosts, 0)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(out, "cert.pem"), certPEM, 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(out, "key.pem"), keyPEM, 0o600); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "wrote %s and %s\n", filepath.Join(out, "cert.pem"), filepath.Join(out, "key.pem"))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write cert.pem and key.pem into")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a DNS name or IP address the certificate is for (repeatable)")
	return cmd
}

func executorTokenCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "token [--tenant NAME]",
		Short: "Mint a tenant bearer token; prints the token, and its hash for the config",
		Long: `Print a new random bearer token (256 bits) on stdout and, on stderr, the
tenants entry holding its SHA-256 for the executor's --config. The executor
stores only the hash; keep the token where the client resolves it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, sum, err := executor.MintToken()
			if err != nil {
				return err
			}
			fmt.Println(tok)
			fmt.Fprintf(os.Stderr, "tenants:\n  - name: %s\n    token_sha256: %s\n", tenant, sum)
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "app", "the tenant name to print in the config entry")
	return cmd
}

// missingExecutorFlags names the required settings left empty, ""
// when none is: the store's names its environment variable too, since a
// fleet's replicas usually take the URL from there (a Secret) and a
// variable that did not reach the process reads as a missing --store.
func missingExecutorFlags(config, store, cert, key string) string {
	var miss []string
	for _, f := range []struct{ name, val string }{
		{"--config", config}, {"--store (or GLOVEBOX_STORE_URL)", store}, {"--tls-cert", cert}, {"--tls-key", key},
	} {
		if f.val == "" {
			miss = append(miss, f.name)
		}
	}
	return strings.Join(miss, ", ")
}
