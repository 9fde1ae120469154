package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
)

// TestExample runs the example as `go run` would, on one database and
// one Runtime: the scripted session, then single programs with -e.
func TestExample(t *testing.T) {
	var log bytes.Buffer
	d, err := openDesk(t.Context(), "", desk.DefaultSeed, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !strings.Contains(log.String(), "Generated ") {
		t.Fatalf("no generation report: %q", log.String())
	}
	s, err := desk.ParseScript(defaultScript)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("session", func(t *testing.T) {
		var out bytes.Buffer
		if err := replay(t.Context(), &out, d, s, ""); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		text := out.String()
		for _, q := range s.Questions {
			if !strings.Contains(text, "Customer: "+q.Ask) {
				t.Errorf("question %s not printed", q.ID)
			}
			for _, a := range q.Attempts {
				if !strings.Contains(text, indent(a.Code)) {
					t.Errorf("code of %s not printed", q.ID)
				}
			}
		}
		if n := strings.Count(text, "\nModel: "); n != len(s.Questions) {
			t.Errorf("%d answers printed, want %d", n, len(s.Questions))
		}
		for _, want := range []string{
			"Model: You've spent $", // the headline answer
			`orders() → `,           // a tool call
			`Result JSON:` + "\n" + `    {"status":"error"`,
			`"class":"NoMethodError"`,
			`"status":"fuel_exhausted"`,
			`no order #1 on this account`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if strings.Contains(text, `"tool_calls"`) {
			t.Error("the model-facing JSON carries the host's transcript")
		}
	})

	t.Run("eval json", func(t *testing.T) {
		var out bytes.Buffer
		o := options{customer: 7, json: true, code: `orders(status: "delivered").size`}
		if err := evalOne(t.Context(), &out, d, o); err != nil {
			t.Fatal(err)
		}
		var res struct {
			Status    string `json:"status"`
			Value     int64  `json:"value"`
			ToolCalls []struct {
				Name   string `json:"name"`
				Kwargs map[string]any
				Result []map[string]any `json:"result"`
			} `json:"tool_calls"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		var want int64
		if err := d.db.QueryRow(`SELECT COUNT(*) FROM orders WHERE customer_id = 7 AND status = 'delivered'`).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if res.Status != "ok" || res.Value != want || len(res.ToolCalls) != 1 || res.ToolCalls[0].Name != "orders" ||
			int64(len(res.ToolCalls[0].Result)) != want {
			t.Fatalf("got %+v, want ok %d with the orders call", res, want)
		}
	})

	t.Run("eval failure exits 1", func(t *testing.T) {
		var out bytes.Buffer
		err := evalOne(t.Context(), &out, d, options{customer: 7, code: `change_plan("platinum")`})
		var exit exitCode
		if !errors.As(err, &exit) || exit != 1 {
			t.Fatalf("err %v, want exit code 1", err)
		}
		if !strings.Contains(out.String(), `error: Glovebox::ToolError: there is no plan "platinum"`) {
			t.Fatalf("output %q", out.String())
		}
	})

	t.Run("unknown customer", func(t *testing.T) {
		err := evalOne(t.Context(), &bytes.Buffer{}, d, options{customer: 100000, code: `profile`})
		if err == nil || !strings.Contains(err.Error(), "no customer 100000") {
			t.Fatalf("err %v, want one naming the missing customer", err)
		}
	})

	t.Run("unknown question", func(t *testing.T) {
		if err := replay(t.Context(), &bytes.Buffer{}, d, s, "nope"); err == nil {
			t.Fatal("replayed a question the script lacks")
		}
	})
}
