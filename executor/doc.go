// Package executor is glovebox's executor: an HTTPS server that runs
// commands for remote callers on a dedicated sandbox host, so that an
// escape from the sandbox lands on a machine holding no application
// secrets. `glovebox executor` serves it; package executor/client is its
// client, a box/remote Executor. The wire contract, every error code and
// the design of idempotency are in EXECUTOR.md.
//
// # Serving
//
//	srv, err := executor.New(executor.Config{Backend: bwrapBox, StorePath: "exec.db", Tenants: tenants})
//	defer srv.Close()
//	http.Server{Handler: srv.Handler(), TLSConfig: …}.ServeTLS(ln, "", "")
//
// Tenants hold the SHA-256 of their bearer tokens ([MintToken],
// [HashToken]) and their limits ([Tenant]). [DevCert] makes a localhost
// certificate for development.
//
// # Nothing run twice, nothing lost
//
// Each run is recorded under its tenant's idempotency key in an SQLite
// store before the backend sees it, and marked running (durably) before
// it starts. A repeat of the key attaches to the live run or gets the
// recorded outcome; a different request under it is refused. [New] marks
// what a dead process left queued or running as lost: reported, never run
// again. Runs continue when their client goes away.
//
// # Extension
//
// [Server.Handle] adds authenticated routes; evals (eval*.go in this
// package) reuse the job core (serveJob, the event stream, the store) as
// EXECUTOR.md's "Extending" section describes.
package executor
