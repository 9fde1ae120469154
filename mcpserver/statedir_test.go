package mcpserver_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// sessionCallFrom makes a ruby_session call under MCP 2026-07-28 over
// HTTP from the loopback address local (the server tells clients without
// per-user auth apart by address), passing handle when it is not "".
func sessionCallFrom(t *testing.T, url, local, code, handle string) (res, rpcErr map[string]any) {
	t.Helper()
	args := map[string]any{"code": code}
	if handle != "" {
		args["session"] = handle
	}
	a, _ := json.Marshal(args)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ruby_session","arguments":` + string(a) + `,` + meta2026 + `}}`
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer secret", "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "ruby_session"} {
		req.Header.Set(k, v)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if i := strings.Index(string(data), "data: "); i >= 0 { // an event stream of one message
		data = []byte(strings.SplitN(string(data[i+len("data: "):]), "\n", 2)[0])
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("ruby_session from %s: %v: %s", local, err, data)
	}
	res, _ = m["result"].(map[string]any)
	rpcErr, _ = m["error"].(map[string]any)
	return res, rpcErr
}

// dirBytes sums the sizes of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// One client without per-user auth cannot fill the --state-dir for
// everyone (41 ruby_session calls holding ~100 MiB each filled 4 GiB, and
// every user's approvals and handles failed for up to two hours): its
// session handles take at most its share, its oldest being dropped (and
// refused as expired early) while its newest works, and a client at
// another address still gets and continues a handle.
func TestStateDirClientShare(t *testing.T) {
	dir := t.TempDir()
	const share = 4 << 20
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{StateDir: dir, MaxStateBytes: 8 * share, MaxClientStateBytes: share})
	url := serveHTTPWith(t, s, mcpserver.HTTPOptions{})
	handle := func(res map[string]any) string {
		sc, _ := res["structuredContent"].(map[string]any)
		h, _ := sc["session"].(string)
		if h == "" || sc["session_reset"] == true {
			t.Fatalf("no session handle: %v", res)
		}
		return h
	}
	var handles []string
	for i := range 41 {
		res, e := sessionCallFrom(t, url, "127.0.0.2", `$k = Random.bytes(1_000_000); 1`, "")
		if e != nil {
			t.Fatalf("call %d: %v", i, e)
		}
		handles = append(handles, handle(res))
		if n := dirBytes(t, dir); n > share {
			t.Fatalf("after call %d the state directory holds %d bytes, over the client's share of %d", i, n, share)
		}
	}
	t.Logf("the state directory holds %d bytes after 41 calls", dirBytes(t, dir))
	if _, e := sessionCallFrom(t, url, "127.0.0.2", `$k.bytesize`, handles[0]); e == nil || !strings.Contains(e["message"].(string), "expired early") {
		t.Fatalf("the client's oldest handle: %v", e)
	}
	if res, e := sessionCallFrom(t, url, "127.0.0.2", `$k.bytesize`, handles[40]); e != nil || !strings.Contains(mustJSON(res), `"value":1000000`) {
		t.Fatalf("the client's newest handle: %v %v", res, e)
	}
	res, e := sessionCallFrom(t, url, "127.0.0.3", `$k = Random.bytes(1_000_000); 1`, "")
	if e != nil {
		t.Fatalf("another client: %v", e)
	}
	if res, e := sessionCallFrom(t, url, "127.0.0.3", `$k.bytesize + 1`, handle(res)); e != nil || !strings.Contains(mustJSON(res), `"value":1000001`) {
		t.Fatalf("another client's handle: %v %v", res, e)
	}
}
