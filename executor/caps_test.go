package executor_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/remote"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// TestOverCapLimitsGetTheCap: every limit a run or an eval asks for above
// the executor's cap is lowered to the cap (EXECUTOR.md), not to the
// default: 5 MiB of output under a 4 MiB cap keeps 4 MiB, a 660 s timeout
// under a 10 min cap runs 10 min. Zero takes the default (runs) or the
// cap (evals); a request within the cap is kept.
func TestOverCapLimitsGetTheCap(t *testing.T) {
	p := startInproc(t, 1, func(c *executor.Config) {
		c.MaxOutput, c.MaxTimeout = 4<<20, 10*time.Minute
		c.MaxMemory, c.MaxPids, c.MaxDisk, c.MaxOutputFiles = 600<<20, 200, 300<<20, 5<<20
	})
	got := p.srv.CapLimits(box.Command{Timeout: 660 * time.Second,
		Limits: box.Limits{Output: 5 << 20, Memory: 1 << 30, Pids: 1000, Disk: 1 << 30, OutputFiles: 1 << 30}})
	want := box.Command{Timeout: 10 * time.Minute, Limits: box.Limits{Output: 4 << 20, Memory: 600 << 20, Pids: 200, Disk: 300 << 20, OutputFiles: 5 << 20}}
	if got.Timeout != want.Timeout || got.Limits != want.Limits {
		t.Errorf("over the caps: got %v %+v, want %v %+v", got.Timeout, got.Limits, want.Timeout, want.Limits)
	}
	got = p.srv.CapLimits(box.Command{})
	want = box.Command{Timeout: box.DefaultTimeout, Limits: box.Limits{Output: box.DefaultOutput, Memory: 600 << 20, Pids: 200, Disk: 300 << 20, OutputFiles: 5 << 20}}
	if got.Timeout != want.Timeout || got.Limits != want.Limits {
		t.Errorf("zero: got %v %+v, want %v %+v", got.Timeout, got.Limits, want.Timeout, want.Limits)
	}
	within := box.Command{Timeout: 45 * time.Second, Limits: box.Limits{Output: 3 << 20, Memory: 100 << 20, Pids: 10, Disk: 10 << 20, OutputFiles: 1 << 20}}
	if got := p.srv.CapLimits(within); got.Timeout != within.Timeout || got.Limits != within.Limits {
		t.Errorf("within: got %v %+v", got.Timeout, got.Limits)
	}

	caps := gb.Limits{Timeout: 20 * time.Second, Fuel: 1e9, Memory: 700 << 20, Stdout: 2 << 20, Stderr: 1 << 20,
		Value: 3 << 20, ToolPayload: 4 << 20, FileWrite: 8 << 20, FileCreates: 50}
	if err := p.srv.EnableEvals(context.Background(), executor.EvalConfig{PoolSize: -1, Limits: caps}); err != nil {
		t.Fatal(err)
	}
	over := wire.EvalLimits{TimeoutMS: 3_600_000, Fuel: 1e12, Memory: 1 << 30, Stdout: 1 << 30, Stderr: 1 << 30,
		Value: 1 << 30, ToolPayload: 1 << 30, FileWrite: 1 << 30, FileCreates: 1 << 20}
	for name, l := range map[string]wire.EvalLimits{"over": over, "zero": {}} {
		g := p.srv.EvalLimits(l)
		if g.Timeout != caps.Timeout || g.Fuel != caps.Fuel || g.Memory != caps.Memory || g.Stdout != caps.Stdout || g.Stderr != caps.Stderr ||
			g.Value != caps.Value || g.ToolPayload != caps.ToolPayload || g.FileWrite != caps.FileWrite || g.FileCreates != caps.FileCreates {
			t.Errorf("eval limits %s the caps: got %+v, want %+v", name, g, caps)
		}
	}
	in := wire.EvalLimits{TimeoutMS: 5000, Fuel: 1e6, Memory: 400 << 20, Stdout: 1000, Stderr: 1000, Value: 1000, ToolPayload: 1000, FileWrite: 1000, FileCreates: 5}
	g := p.srv.EvalLimits(in)
	if g.Timeout != 5*time.Second || g.Fuel != 1e6 || g.Memory != 400<<20 || g.Stdout != 1000 || g.Stderr != 1000 ||
		g.Value != 1000 || g.ToolPayload != 1000 || g.FileWrite != 1000 || g.FileCreates != 5 {
		t.Errorf("eval limits within the caps: got %+v", g)
	}
}

// TestOverCapOutputRealProcess: on a real executor process (max_output at
// its default, 4 MiB), a run asking for 5 MiB of output that writes
// 4.5 MB keeps 4 MiB (it kept 1 MiB, box's default); an eval sent to it
// (started without --evals) is refused evals_disabled with a message that
// says to use --evals; Client.Close releases the client's connections.
func TestOverCapOutputRealProcess(t *testing.T) {
	setup := newProcSetup(t, 1)
	p := setup.start(t)
	c := setup.client(t, "https://"+p.url, setup.toks.a)
	res, err := remote.New(c, nil).Run(context.Background(), box.Command{
		Shell: `head -c 4500000 /dev/zero | tr '\0' x`, Limits: box.Limits{Output: 5 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != executor.DefaultMaxOutput || !res.StdoutTruncated {
		t.Errorf("kept %d bytes of stdout (truncated %v), want the cap %d", len(res.Stdout), res.StdoutTruncated, executor.DefaultMaxOutput)
	}

	rt, err := gb.New(context.Background(), gb.Config{PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	_, err = c.Evaluator(rt).Eval(context.Background(), "1+1")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != string(wire.CodeEvalsDisabled) || ce.Status != http.StatusNotImplemented || !strings.Contains(ce.Message, "--evals") {
		t.Errorf("eval on an executor without --evals: %v", err)
	}

	port := p.url[strings.LastIndex(p.url, ":")+1:]
	if established(t, port) == 0 {
		t.Fatal("no connection to the executor before Close")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return established(t, port) == 0 })
}

// established counts this process's established TCP connections to
// 127.0.0.1:port (from /proc/net/tcp).
func established(t *testing.T, port string) int {
	data, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Skipf("no /proc/self/net/tcp: %v", err)
	}
	pn, _ := strconv.Atoi(port)
	remote := strings.ToUpper(strconv.FormatInt(int64(pn), 16))
	for len(remote) < 4 {
		remote = "0" + remote
	}
	n := 0
	for _, l := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(l)
		// local, remote address; state 01 is ESTABLISHED. Our side's
		// remote address is the executor's: 0100007F:PORT.
		if len(f) > 3 && f[2] == "0100007F:"+remote && f[3] == "01" {
			n++
		}
	}
	return n
}
