package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// TestExecutorCLIQuickstart follows the README's executor steps with the
// real binary: devcert, token (its config entry on stderr), serve on
// bubblewrap, run a command through executor/client as the README shows,
// run it again (answered from the record, its output still streamed),
// then SIGTERM: the operator is told it drains and that it stopped (it
// used to exit without a word), and the exit status is 0.
func TestExecutorCLIQuickstart(t *testing.T) {
	requiresBwrapCLI(t)
	dir := t.TempDir()
	if _, errOut, code := run(t, "", "executor", "devcert", "--out", filepath.Join(dir, "tls")); code != 0 {
		t.Fatalf("devcert: %d %s", code, errOut)
	}
	tok, entry, code := run(t, "", "executor", "token", "--tenant", "app")
	if code != 0 || !strings.HasPrefix(tok, "gbx_") || !strings.Contains(entry, "token_sha256: ") {
		t.Fatalf("token: %d %q %q", code, tok, entry)
	}
	// The stderr of token is the config file's tenants section as it is.
	if err := os.WriteFile(filepath.Join(dir, "executor.yaml"), []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "executor", "--config", filepath.Join(dir, "executor.yaml"), "--store", filepath.Join(dir, "exec.db"),
		"--backend", "bwrap", "--tls-cert", filepath.Join(dir, "tls/cert.pem"), "--tls-key", filepath.Join(dir, "tls/key.pem"),
		"--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	var url string
	for url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the executor ended before it listened")
			}
			if rest, ok := strings.CutPrefix(l, "glovebox executor: listening on "); ok {
				url, _, _ = strings.Cut(rest, " ")
			}
		case <-time.After(time.Minute):
			t.Fatal("the executor did not say where it listens")
		}
	}

	pem, err := os.ReadFile(filepath.Join(dir, "tls/cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{URL: url, Token: tok, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	res, err := remote.New(c, nil).Run(ctx, box.Command{Argv: []string{"sh", "-c", "echo $((2+2))"},
		Stream: func(_ int, p []byte) { streamed.Write(p) }})
	if err != nil || string(res.Stdout) != "4\n" || streamed.String() != "4\n" || !res.Posture.OffHost() {
		t.Fatalf("run: %v %+v streamed %q", err, res, streamed.String())
	}

	// The same command again with client.Key (a key made from the
	// command, on purpose) is answered from the record, never run twice;
	// Stream still gets its output.
	date := box.Command{Argv: []string{"date", "+%s%N"}}
	first, err := remote.New(c, client.Key).Run(ctx, date)
	if err != nil {
		t.Fatal(err)
	}
	streamed.Reset()
	date.Stream = func(_ int, p []byte) { streamed.Write(p) }
	res, err = remote.New(c, client.Key).Run(ctx, date)
	if err != nil || res.Stdout != first.Stdout || streamed.String() != first.Stdout {
		t.Fatalf("repeat: %v %+v streamed %q, first %q", err, res, streamed.String(), first.Stdout)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	var said []string
	for l := range lines {
		said = append(said, l)
	}
	if err := <-done; err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	done <- nil
	all := strings.Join(said, "\n")
	if !strings.Contains(all, "glovebox executor: terminated: draining") || !strings.Contains(all, "glovebox executor: stopped") {
		t.Errorf("the executor did not say it drains and stopped:\n%s", all)
	}
}

// TestStoreAndBenchFlags: `executor --help` documents the PostgreSQL
// store and its environment variable; `bench --only` refuses an unknown
// group of rows, naming the known ones.
func TestStoreAndBenchFlags(t *testing.T) {
	out, _, code := run(t, "", "executor", "--help")
	for _, want := range []string{"postgres://", "GLOVEBOX_STORE_URL"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("executor --help (exit %d) does not mention %s:\n%s", code, want, out)
		}
	}
	_, errs, code := run(t, "", "bench", "--only", "nope")
	if code != 2 || !strings.Contains(errs, "--only nope") || !strings.Contains(errs, "executor") {
		t.Errorf("bench --only nope: exit %d, %q", code, errs)
	}
}

// TestExecutorMissingFlagsNamed: leaving out required settings names
// each one, the store's with its environment variable (a fleet's URL
// usually comes from there, and a variable that did not reach the
// process otherwise reads as a --store nobody meant to give).
func TestExecutorMissingFlagsNamed(t *testing.T) {
	t.Setenv("GLOVEBOX_STORE_URL", "")
	_, errOut, code := run(t, "", "executor", "--config", "executor.yaml", "--tls-key", "key.pem")
	if code != 2 || !strings.Contains(errOut, "missing: --store (or GLOVEBOX_STORE_URL), --tls-cert\n") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
