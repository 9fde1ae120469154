package executor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStoreEval is the SQLite store's share of one eval: a durable
// begin (recorded running) and a final record, from 4 goroutines as
// 4 clients of 2 workers send them:
//
//	go test -run '^$' -bench BenchmarkStoreEval -benchtime 5000x -cpuprofile cpu.out ./executor
//
// user-µs/op and sys-µs/op are this process's processor time per eval
// (getrusage), the figure that counts on a busy host; ns/op is mostly
// waiting for the disk.
func BenchmarkStoreEval(b *testing.B) {
	s, err := openStore(filepath.Join(b.TempDir(), "store.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	ctx := context.Background()
	rec := []byte(`{"key":"e-0123456789abcdef0123456789abcdef","state":"completed","backend":"wasm","started":true,` +
		`"created":"2026-12-02T09:00:00.000000001Z","finished":"2026-12-02T09:00:00.000400001Z",` +
		`"eval":{"status":"ok","value":"2","stdout":"","stderr":"","duration_ms":0.04}}`)
	var n atomic.Int64
	b.ResetTimer()
	user0, sys0 := rusage()
	b.SetParallelism(2)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "e-" + strconv.FormatInt(n.Add(1), 10) + "-0123456789abcdef0123456789"
			now := time.Now()
			_, created, err := s.begin(ctx, &entry{Tenant: "bench", Key: key, Kind: "eval", Hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				State: "running", Started: true, Created: now})
			if err != nil || !created {
				b.Error(err, created)
				return
			}
			if err := s.finish(ctx, "bench", key, "completed", true, rec); err != nil {
				b.Error(err)
				return
			}
		}
	})
	user, sys := rusage()
	b.ReportMetric(float64((user-user0).Microseconds())/float64(b.N), "user-µs/op")
	b.ReportMetric(float64((sys-sys0).Microseconds())/float64(b.N), "sys-µs/op")
	b.ReportMetric(float64(s.commits.Load())/float64(b.N), "commits/op")
	b.ReportMetric(float64(s.syncs.Load())/float64(b.N), "fsyncs/op")
	if fi, err := os.Stat(s.path + "-wal"); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "WAL-MiB")
	}
}

// rusage is this process's processor time so far: user and system.
func rusage() (user, sys time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
