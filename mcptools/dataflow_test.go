package mcptools_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/npmtest"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// A bound server's results are labelled per server: the model sees the
// email its tool returned only as a token, and the server's tools accept
// it only where Sinks says.
func TestLabelsFromBoundServer(t *testing.T) {
	const email = "grace.hopper@example.com"
	for _, accept := range []bool{false, true} {
		var ts glovebox.Toolset
		srv := edge(t, "edge", "MCPTOOLS_TEST_USER=account of "+email)
		srv.ToolLabels = map[string][]glovebox.Label{"whoami": {{Kind: glovebox.KindEmail, Find: glovebox.FindEmails}}}
		if accept {
			srv.Sinks = map[string]glovebox.SinkPolicy{"echo": {Accepts: []glovebox.Kind{glovebox.KindEmail}}}
		}
		bind(t, &ts, srv)
		rt := runtime(t, &ts, glovebox.Limits{})
		res := eval(t, rt, `w = whoami["text"]
			e = w[/\S+@\S+/]
			[w, e == "`+email+`", (echo(n: 1, s: e.upcase).to_s rescue "#{$!.class}: #{$!.message}")]`)
		v := wantOK(t, res).([]any)
		if strings.Contains(v[0].(string), email) || !strings.Contains(v[0].(string), "[[email:") || v[1] != true {
			t.Errorf("whoami shows %v, program saw the value: %v; want a token and true", v[0], v[1])
		}
		denied := strings.HasPrefix(v[2].(string), "Glovebox::ToolDenied: echo may not receive email data")
		if denied == accept {
			t.Errorf("accept %v: echo gave %v", accept, v[2])
		}
		if accept && !strings.Contains(v[2].(string), "[[email:") {
			t.Errorf("echo's result %v should show the token, not the value", v[2])
		}
	}
}

// The labels of a real server nobody here wrote (server-memory over
// stdio): its knowledge graph, seeded with a person whose observation
// holds an email, is labelled server-wide with FindEmails and a phone
// path on one tool. The model sees tokens in read_graph's result and in
// the program's answer, the server's search_nodes (which Sinks lets
// receive emails) finds the person by the real address, and
// add_observations, a sink of the default policy, refuses the email and
// the phone number in any spelling.
func TestLabelsFromRealServer(t *testing.T) {
	const email, phone = "katherine.johnson@example.net", "+1 757 555 0142"
	memory := npmtest.Bin(t, "@modelcontextprotocol/server-memory", "mcp-server-memory")
	file := filepath.Join(t.TempDir(), "m.jsonl")
	seed := `{"type":"entity","name":"Katherine","entityType":"person","observations":["email ` + email + `","phone ` + phone + `"]}` + "\n"
	if err := os.WriteFile(file, []byte(seed), 0o600); err != nil {
		t.Fatal(err)
	}
	var ts glovebox.Toolset
	bind(t, &ts, mcptools.Server{Name: "memory", Command: []string{memory}, Env: []string{"PATH=/usr/bin:/bin", "MEMORY_FILE_PATH=" + file},
		Labels: []glovebox.Label{{Kind: glovebox.KindEmail, Find: glovebox.FindEmails}},
		ToolLabels: map[string][]glovebox.Label{"read_graph": {{Kind: glovebox.KindPhone, Find: func(v any) []string {
			if strings.Contains(fmt.Sprint(v), phone) {
				return []string{phone}
			}
			return nil
		}}}},
		Sinks: map[string]glovebox.SinkPolicy{"search_nodes": {Accepts: []glovebox.Kind{glovebox.KindEmail}}}})
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 20 * time.Second})
	res := eval(t, rt, `g = read_graph["text"]
		e = g[/[\w.]+@[\w.]+\w/]
		ph = g[/\+1 [\d ]+\d/]
		found = search_nodes(query: e)["text"].include?("Katherine")
		tries = [e.upcase, ph.delete(" "), [e].pack("m0")].map { |x|
			begin; add_observations(observations: [{entityName: "Katherine", contents: ["copy " + x]}]); :written
			rescue Glovebox::ToolDenied => err; err.message[/may not receive \w+/]; end }
		[g, e, found, tries]`)
	v := wantOK(t, res).([]any)
	b, _ := json.Marshal(res)
	for _, s := range []string{email, "katherine.johnson", "757 555 0142", "7575550142"} {
		if strings.Contains(string(b), s) {
			t.Errorf("the Result shows %q: %s", s, b)
		}
	}
	if g := v[0].(string); !strings.Contains(g, "[[email:") || !strings.Contains(g, "[[phone:") || v[1] != tokenOf(g, "email") {
		t.Errorf("read_graph showed %q, the address %v", g, v[1])
	}
	if v[2] != true {
		t.Error("search_nodes, which accepts emails, did not find the person by the address")
	}
	if got := fmt.Sprint(v[3]); got != "[may not receive email may not receive phone may not receive email]" {
		t.Errorf("add_observations gave %s", got)
	}
	if data, _ := os.ReadFile(file); strings.Contains(string(data), "copy") {
		t.Errorf("a refused call reached the server: %s", data)
	}
}

// tokenOf returns the first token of kind in s.
func tokenOf(s string, kind string) string {
	i := strings.Index(s, "[["+kind+":")
	if i < 0 {
		return ""
	}
	j := strings.Index(s[i:], "]]")
	return s[i : i+j+2]
}
