package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
)

// executorEvalFlags are `glovebox executor`'s eval options.
var executorEvalFlags struct {
	on       bool
	timeout  time.Duration
	memory   int64
	sessions int
	idle     time.Duration
	pool     int
	worker   string
	noReuse  bool
	share    bool
	keys     []string
}

// addExecutorEvalFlags registers them (one line in executor.go).
func addExecutorEvalFlags(f *pflag.FlagSet) {
	f.BoolVar(&executorEvalFlags.on, "evals", false, "also serve Ruby evals (POST /v1/evals, /v1/sessions): the guest runs here, its tool calls go back to the client")
	f.DurationVar(&executorEvalFlags.timeout, "eval-timeout", 0, "the longest an eval may ask for (0: glovebox's default, 10s)")
	f.Int64Var(&executorEvalFlags.memory, "eval-memory", 0, "the most linear memory an eval may ask for, in bytes (0: glovebox's default, 512 MiB)")
	f.IntVar(&executorEvalFlags.sessions, "eval-sessions", 0, "open sessions per tenant (0: 8)")
	f.DurationVar(&executorEvalFlags.idle, "eval-session-idle", 0, "close a session unused this long (0: 10m)")
	f.StringVar(&executorEvalFlags.worker, "eval-worker", "", `run each eval in a fresh worker process: "bwrap" (bubblewrap: namespaces, no network, seccomp, cgroup when available); empty: in this process (config key eval_worker)`)
	f.IntVar(&executorEvalFlags.pool, "eval-pool", 0, "prepared VMs kept per tenant and tool set (0: 1; negative: none)")
	f.BoolVar(&executorEvalFlags.noReuse, "eval-no-vm-reuse", false, "run every eval in a VM made for it, in memory mapped anew, never one rewound or reset after another eval (by default a tenant's VM is rewound for its next eval: the bytes are reset, but timing first writes tells how much memory its earlier evals wrote; costs the page faults reuse saves, about 0.3-0.8 ms an eval here)")
	f.StringArrayVar(&executorEvalFlags.keys, "state-key", nil, "keep sessions and paused evals in the store, sealed with the key in this file (64 hex digits, such as openssl rand -hex 32 prints; not readable by others): every executor of a fleet needs the same key; repeat to rotate (the first seals, all open)")
	f.BoolVar(&executorEvalFlags.share, "eval-share-vms", false, "let tenants naming the same tools share rewound VMs and reset memory (saves a pool and idle VMs per tenant; what first-write timing tells then crosses tenants)")
}

// enableExecutorEvals turns evals on when --evals was given (one line in
// executor.go, after executor.New); shared says the store is a fleet's
// (PostgreSQL).
func enableExecutorEvals(srv *executor.Server, worker string, shared bool, profiles map[string]executor.EvalProfile) error {
	if !executorEvalFlags.on {
		return nil
	}
	fl := executorEvalFlags
	if fl.worker != "" {
		worker = fl.worker
	}
	if worker != "" && worker != "bwrap" {
		return usageError{fmt.Errorf("executor: --eval-worker %q: want bwrap (or nothing: in-process)", worker)}
	}
	if worker != "" && len(profiles) > 0 {
		return usageError{fmt.Errorf("executor: eval profiles are not served with an eval worker: their mounts and tools are this process's")}
	}
	keys, err := executorKeyring(fl.keys)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	err = srv.EnableEvals(ctx, executor.EvalConfig{StateKeys: keys,
		Limits:   glovebox.Limits{Timeout: fl.timeout, Memory: fl.memory},
		PoolSize: fl.pool, DisableVMReuse: fl.noReuse, ShareVMsAcrossTenants: fl.share, MaxSessions: fl.sessions, SessionIdle: fl.idle,
		Worker: executor.WorkerConfig{Kind: worker}, Profiles: profiles,
	})
	if err != nil {
		return err
	}
	where := "in-process"
	if worker != "" {
		where = "in a " + worker + " worker per eval"
	}
	if len(profiles) > 0 {
		where += fmt.Sprintf(", %d eval profile(s)", len(profiles))
	}
	if keys != nil {
		where += ", sessions and paused evals kept in the store"
	} else if shared {
		// The likeliest fleet misconfiguration: say it at the start, not
		// at the first session that moves.
		where += ", sessions in this process only (no --state-key: the fleet's other executors do not see them, nor this one theirs)"
	}
	fmt.Fprintf(os.Stderr, "glovebox executor: evals on, %s (engine ready in %v)\n", where, time.Since(start).Round(time.Millisecond))
	return nil
}

// executorKeyring reads the --state-key files (nil for none) into one
// ring, the first sealing; each key's id derives from the secret, so
// every executor reading the same file names the key alike.
func executorKeyring(files []string) (*glovebox.Keyring, error) {
	if len(files) == 0 {
		return nil, nil
	}
	var ks []glovebox.StateKey
	for _, f := range files {
		// Group-readable is allowed: a Kubernetes Secret volume gives its
		// files the pod's fsGroup, not its user.
		secret, err := readKeyFileMode(f, 0o007)
		if err != nil {
			return nil, usageError{fmt.Errorf("--state-key: %w", err)}
		}
		ks = append(ks, glovebox.StateKey{ID: keyID(secret), Secret: secret})
	}
	k, err := glovebox.NewKeyring(ks...)
	if err != nil {
		return nil, usageError{fmt.Errorf("--state-key: %w", err)}
	}
	return k, nil
}
