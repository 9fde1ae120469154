// Package benchhook lets glovebox bench (internal/bench) measure parts
// of other packages that are not theirs to export: a package registers
// a function here at init, and the bench calls it if it is set. Nothing
// else uses it.
package benchhook

import "context"

// StoreWrites, set by package executor, opens a new idempotency store
// (an SQLite file at path, or the PostgreSQL database at url when url is
// set) and returns the store's writes of one eval as the executor makes
// them — the key recorded running, durably (the write that waits for the
// disk), then its final record (a `1+1` eval's, about 300 bytes,
// committed without waiting) — under key number i, and a function that
// closes the store. Errors: the store could not be opened, or a write
// failed.
var StoreWrites func(ctx context.Context, path, url string) (write func(i int) error, close func() error, err error)
