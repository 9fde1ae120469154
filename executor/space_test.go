package executor_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestStoreFullDisk puts the store on a 2 MiB tmpfs and fills it: a run
// whose final record cannot be written is never reported completed (its
// client gets store_failed, and the record reads lost, also after a
// restart); with the disk short, /readyz is 503 and new runs are refused
// store_full before they start; once space is back, /readyz is 200 and
// runs complete again.
func TestStoreFullDisk(t *testing.T) {
	requireBwrap(t)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 2 MiB tmpfs for the store (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	var cfg executor.Config
	p := startInproc(t, 1, func(c *executor.Config) {
		c.StorePath, c.MinStoreFree = filepath.Join(mnt, "store.db"), 256<<10
		cfg = *c
	})
	c := p.client(t, p.toks.a)
	b := remote.New(c, nil)
	ctx := context.Background()
	if res, err := b.Run(ctx, box.Command{Shell: "echo ok"}); err != nil || res.Stdout != "ok\n" {
		t.Fatalf("first run: %v %v", res, err)
	}
	if code, body := rawDo(t, p, "", "GET", "/readyz", ""); code != 200 {
		t.Fatalf("/readyz %d %s", code, body)
	}

	// 500 KiB left: the run is admitted, its 1 MB record does not fit.
	fill(t, filepath.Join(mnt, "filler1"), free(t, mnt)-500<<10)
	_, err := b.Run(ctx, box.Command{Shell: `head -c 800000 /dev/zero | tr '\0' x`, Limits: box.Limits{Output: 1 << 20}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "store_failed" || ce.InDoubt() {
		t.Fatalf("a run whose record could not be stored: want store_failed, got %v", err)
	}
	key := ce.Key
	if st, code, err := c.State(ctx, key); st != "lost" || code != "store_failed" || err != nil {
		t.Errorf("its record: %s %s %v", st, code, err)
	}

	// The disk short: not ready, and new runs refused before they start.
	fill(t, filepath.Join(mnt, "filler2"), free(t, mnt)-64<<10)
	if code, body := rawDo(t, p, "", "GET", "/readyz", ""); code != 503 || !strings.Contains(body, "min_store_free") {
		t.Errorf("/readyz with the disk full: %d %s", code, body)
	}
	_, err = c.Run(ctx, remote.Request{IdempotencyKey: "while-full", Command: box.Command{Shell: "echo no"}})
	if !errors.As(err, &ce) || ce.Code != "store_full" || ce.Status != 507 || ce.InDoubt() {
		t.Errorf("a run on the full disk: want 507 store_full, got %v", err)
	}
	if _, _, err := c.State(ctx, "while-full"); !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("the refused run was recorded: %v", err)
	}

	os.Remove(filepath.Join(mnt, "filler1"))
	os.Remove(filepath.Join(mnt, "filler2"))
	if code, body := rawDo(t, p, "", "GET", "/readyz", ""); code != 200 {
		t.Errorf("/readyz with space again: %d %s", code, body)
	}
	if res, err := b.Run(ctx, box.Command{Shell: "echo back"}); err != nil || res.Stdout != "back\n" {
		t.Fatalf("with space again: %v %v", res, err)
	}

	// A restart on the same store says lost too, never completed.
	p.hs.Close()
	p.srv.Close()
	srv, err := executor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewTLSServer(srv.Handler())
	defer hs.Close()
	pool := p.pool
	pool.AddCert(hs.Certificate())
	c2, err := client.Dial(ctx, client.Config{URL: hs.URL, Token: p.toks.a, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if st, _, err := c2.State(ctx, key); st != "lost" || err != nil {
		t.Errorf("after a restart the run reads %s %v", st, err)
	}
}

// TestTenantStoredBytesQuota: a tenant whose records reach its
// max_stored_bytes has its next run refused quota_exceeded (507) before
// it starts; the run that reached it was kept cut to fit, with
// quota_truncated; a retry of it is still answered; another tenant is
// not affected.
func TestTenantStoredBytesQuota(t *testing.T) {
	p := startInproc(t, 1, func(c *executor.Config) { c.Tenants[0].MaxStoredBytes = 300 << 10 })
	ctx := context.Background()
	c := p.client(t, p.toks.a)
	big := remote.Request{IdempotencyKey: "q1", Command: box.Command{Shell: `head -c 400000 /dev/zero | tr '\0' x`, Limits: box.Limits{Output: 1 << 20}}}
	streamed := 0
	big.Stream = func(_ int, b []byte) { streamed += len(b) }
	res, err := c.Run(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	if !res.StdoutTruncated || len(res.Stdout) >= 300<<10 || len(res.Stdout) == 0 || streamed != 400000 {
		t.Errorf("the run over the quota: %d bytes of stdout kept (truncated %v), %d streamed", len(res.Stdout), res.StdoutTruncated, streamed)
	}
	if code, body := rawDo(t, p, p.toks.a, "GET", "/v1/runs/q1", ""); code != 200 || !strings.Contains(body, `"quota_truncated":true`) || len(body) > 300<<10 {
		t.Errorf("its record (%d bytes): %d %.200s", len(body), code, body)
	}

	_, err = c.Run(ctx, remote.Request{IdempotencyKey: "q2", Command: box.Command{Shell: "echo more"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "quota_exceeded" || ce.Status != 507 || !strings.Contains(ce.Message, "max_stored_bytes") {
		t.Fatalf("the next run: want 507 quota_exceeded, got %v", err)
	}
	if _, _, err := c.State(ctx, "q2"); !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("the refused run was recorded: %v", err)
	}
	big.Stream = nil
	if again, err := c.Run(ctx, big); err != nil || again.Stdout != res.Stdout {
		t.Errorf("a retry of the kept run: %v", err)
	}
	if res, err := p.client(t, p.toks.b).Run(ctx, remote.Request{Command: box.Command{Shell: "echo b"}}); err != nil || res.Stdout != "b\n" {
		t.Errorf("the other tenant: %v %v", res, err)
	}
}

func free(t *testing.T, dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// fill writes a file of n bytes (none when n <= 0).
func fill(t *testing.T, path string, n int64) {
	if n <= 0 {
		return
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}
