package executor_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestCrashMidRunIsLost: a real executor process is SIGKILLed while a run
// executes; the client's error is in doubt; a new process on the same
// store answers the retry with the same key "lost" without running it
// again (the host counter stays at 1), and no sandbox process survives.
func TestCrashMidRunIsLost(t *testing.T) {
	cnt := newCounter(t)
	setup := newProcSetup(t, cnt.port)
	p1 := setup.start(t)
	c1 := setup.client(t, "https://"+p1.url, setup.toks.a)
	const marker = "31.4159"
	req := remote.Request{IdempotencyKey: "crash-1", Command: box.Command{
		Shell:   cnt.hitShell("crash") + " && sleep " + marker,
		Network: box.Network{Allow: []string{"127.0.0.1"}}}}
	done := make(chan error, 1)
	go func() { _, err := c1.Run(context.Background(), req); done <- err }()
	waitFor(t, func() bool { return cnt.n.Load() == 1 })
	p1.kill()
	err := <-done
	var ce *client.Error
	if !errors.As(err, &ce) || !ce.InDoubt() {
		t.Fatalf("the killed executor's run: want in doubt, got %v", err)
	}
	waitFor(t, func() bool { return !sleeping(marker) })

	p2 := setup.start(t)
	c2 := setup.client(t, "https://"+p2.url, setup.toks.a)
	_, err = c2.Run(context.Background(), req)
	if !errors.As(err, &ce) || ce.Code != "lost" || ce.InDoubt() || !strings.Contains(ce.Message, "may have partly run") {
		t.Fatalf("retry after restart: want lost, got %v", err)
	}
	if st, code, err := c2.State(context.Background(), "crash-1"); st != "lost" || code != "lost" || err != nil {
		t.Errorf("record: %s %s %v", st, code, err)
	}
	if n := cnt.n.Load(); n != 1 {
		t.Errorf("the command ran %d times", n)
	}
	// The restarted executor still runs new keys.
	res, err := c2.Run(context.Background(), remote.Request{IdempotencyKey: "crash-2", Command: box.Command{Shell: "echo alive"}})
	if err != nil || res.Stdout != "alive\n" {
		t.Fatalf("after restart: %v %v", res, err)
	}
}

// sleeping reports whether a process with "sleep marker" in its command
// line is alive.
func sleeping(marker string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "sleep\x00"+marker) {
			return true
		}
	}
	return false
}

// TestSIGTERMDrains: SIGTERM lets the running command finish and send its
// result, refuses new runs meanwhile, and the process exits 0.
func TestSIGTERMDrains(t *testing.T) {
	cnt := newCounter(t)
	setup := newProcSetup(t, cnt.port)
	p := setup.start(t)
	c := setup.client(t, "https://"+p.url, setup.toks.a)
	done := make(chan error, 1)
	var res *box.Result
	go func() {
		var err error
		res, err = c.Run(context.Background(), remote.Request{Command: box.Command{
			Shell: cnt.hitShell("drain") + " && sleep 1 && echo drained", Network: box.Network{Allow: []string{"127.0.0.1"}}}})
		done <- err
	}()
	waitFor(t, func() bool { return cnt.n.Load() == 1 })
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil || res.Stdout != "drained\n" {
		t.Fatalf("the draining run: %v %v", res, err)
	}
	t0 := time.Now()
	<-p.done
	t.Logf("exit %v after the result", time.Since(t0))
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d: %s", code, p.stderr.String())
	}
}

// TestSIGHUPRotatesTokens: a tenant's token is rotated in the config and
// SIGHUP makes the running executor take it: the old token is refused,
// the new one works, and a run admitted under the old one still finishes
// and stays readable (records are by tenant name, not token).
func TestSIGHUPRotatesTokens(t *testing.T) {
	cnt := newCounter(t)
	setup := newProcSetup(t, cnt.port)
	p := setup.start(t)
	url := "https://" + p.url
	old := setup.client(t, url, setup.toks.a)
	done := make(chan error, 1)
	go func() {
		_, err := old.Run(context.Background(), remote.Request{IdempotencyKey: "rot", Command: box.Command{
			Shell: cnt.hitShell("rot") + " && sleep 1 && echo survived", Network: box.Network{Allow: []string{"127.0.0.1"}}}})
		done <- err
	}()
	waitFor(t, func() bool { return cnt.n.Load() == 1 })

	tok, sum, err := executor.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(setup.config)
	rotated := strings.Replace(string(cfg), executor.HashToken(setup.toks.a), sum, 1)
	if rotated == string(cfg) {
		t.Fatal("the config does not hold tenant a's hash")
	}
	os.WriteFile(setup.config, []byte(rotated), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool {
		_, err := client.Dial(context.Background(), client.Config{URL: url, Token: setup.toks.a, RootCAs: setup.pool})
		return err != nil
	})
	if err := <-done; err != nil {
		t.Fatalf("the run admitted before the rotation: %v", err)
	}
	fresh := setup.client(t, url, tok)
	if st, _, err := fresh.State(context.Background(), "rot"); err != nil || st != "completed" {
		t.Errorf("the tenant's record under its new token: %s %v", st, err)
	}
	_, err = client.Dial(context.Background(), client.Config{URL: url, Token: setup.toks.a, RootCAs: setup.pool})
	wantCode(t, err, "unauthenticated", 401)
}

// TestExecutorRefusesDamagedStore: `glovebox executor` on a store file
// whose middle was overwritten (a copy of a real store, made by a first
// executor process) exits with an error naming the file, and never
// listens.
func TestExecutorRefusesDamagedStore(t *testing.T) {
	setup := newProcSetup(t, 1)
	p := setup.start(t)
	c := setup.client(t, "https://"+p.url, setup.toks.a)
	for i := range 4 {
		res, err := c.Run(context.Background(), remote.Request{Command: box.Command{Argv: []string{"head", "-c", "100000", "/dev/zero"}},
			IdempotencyKey: "fill-" + strconv.Itoa(i)})
		if err != nil || len(res.Stdout) != 100000 {
			t.Fatal(res, err)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM) // a clean stop: everything checkpointed into the file
	<-p.done
	data, err := os.ReadFile(setup.store)
	if err != nil || len(data) < 16*4096 {
		t.Fatalf("the store: %d bytes, %v", len(data), err)
	}
	at := len(data) / 4096 / 2 * 4096
	for i := at; i < at+4096; i++ {
		data[i] = 0x5a
	}
	if err := os.WriteFile(setup.store, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(glovebox(t), "executor", "--listen", "127.0.0.1:0", "--config", setup.config, "--store", setup.store,
		"--tls-cert", setup.cert, "--tls-key", setup.key, "--backend", "bwrap")
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "listening") {
		t.Fatalf("the executor served a damaged store: %v\n%s", err, out)
	}
	for _, want := range []string{setup.store, "is damaged", "restore it from a backup"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("its message lacks %q:\n%s", want, out)
		}
	}
}
