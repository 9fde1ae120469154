package executor_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestMillionWritesBoundedEvents: a program writing one byte a million
// times (Ruby with STDOUT.sync) through a real executor process makes
// events of many bytes each, not one per write, in the stream (and so in
// the job's event log), for a run and for an eval; the executor's peak
// memory grows by far less than a million events would take (49 → 648
// MiB measured before).
func TestMillionWritesBoundedEvents(t *testing.T) {
	setup := newProcSetup(t, 1)
	setup.extra = []string{"--evals", "--eval-pool", "-1"}
	p := setup.start(t)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: setup.pool}}}
	defer hc.CloseIdleConnections()
	before := procStatusKB(t, p.cmd.Process.Pid, "VmRSS")

	const writes = 1_000_000
	events, bytes := countOutputEvents(t, hc, setup, p, "/v1/runs",
		`{"command":{"argv":["ruby","-e","STDOUT.sync = true; 1_000_000.times { $stdout.write(\"x\") }"],"timeout_ms":300000}}`)
	if bytes != writes {
		t.Fatalf("run: %d bytes of stdout streamed, want %d", bytes, writes)
	}
	// At least 100 bytes an event on average: the bound holds however
	// slowly the program writes, up to 200 s of run.
	if events*100 > bytes {
		t.Errorf("run: %d stdout events for %d one-byte writes", events, writes)
	}
	t.Logf("run: %d writes → %d events", writes, events)

	const evalWrites = 100_000
	events, bytes = countOutputEvents(t, hc, setup, p, "/v1/evals",
		`{"code":"STDOUT.sync = true; 100_000.times { $stdout.write(\"x\") }; nil","limits":{"timeout_ms":60000}}`)
	if bytes != evalWrites || events*100 > bytes {
		t.Errorf("eval: %d stdout events, %d bytes for %d one-byte writes", events, bytes, evalWrites)
	}
	t.Logf("eval: %d writes → %d events", evalWrites, events)

	peak := procStatusKB(t, p.cmd.Process.Pid, "VmHWM")
	t.Logf("executor RSS before %d KiB, peak after %d KiB", before, peak)
	if grown := peak - before; grown > 80<<10 {
		t.Errorf("the executor's peak memory grew by %d KiB", grown)
	}
}

// countOutputEvents POSTs body to path and counts the stdout events of
// the answer and their bytes, until the result.
func countOutputEvents(t *testing.T, hc *http.Client, setup *procSetup, p *proc, path, body string) (events, bytes int) {
	t.Helper()
	req, _ := http.NewRequest("POST", "https://"+p.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+setup.toks.a)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	result := false
	for sc.Scan() {
		var ev struct {
			Type   string
			Data   []byte
			Record *struct{ State string }
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Bytes(), err)
		}
		switch ev.Type {
		case "stdout":
			events++
			bytes += len(ev.Data)
		case "result":
			result = true
			if ev.Record == nil || ev.Record.State != "completed" {
				t.Fatalf("%s: result %s", path, sc.Bytes())
			}
		}
	}
	if !result {
		t.Fatalf("%s: no result (status %d, %v)", path, resp.StatusCode, sc.Err())
	}
	return events, bytes
}

// procStatusKB is a "kB" field of /proc/pid/status.
func procStatusKB(t *testing.T, pid int, field string) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc status for the executor: %v", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
