package mcptools_test

import (
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
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
