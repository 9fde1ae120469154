package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
)

// The test process's one database and Runtime, made as `go run` makes
// them. TestExample replays the script, which expects the database
// fresh; the other tests only read the scripted customer's data.
var (
	testDesk   *deskEnv
	testScript *desk.Script
	testLog    bytes.Buffer
)

func TestMain(m *testing.M) {
	var err error
	if testDesk, err = openDesk(context.Background(), "", desk.DefaultSeed, &testLog); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if testScript, err = desk.ParseScript(defaultScript); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testDesk.Close()
	os.Exit(code)
}

// TestExample runs the example as `go run` would: the scripted session,
// then single programs with -e.
func TestExample(t *testing.T) {
	d, s := testDesk, testScript
	if !strings.Contains(testLog.String(), "Generated ") {
		t.Fatalf("no generation report: %q", testLog.String())
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
		if strings.Contains(text, `"fuel_used"`) {
			t.Error("the result JSON printed is not the model's (codemode's)")
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
