package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
)

// replay runs the scripted session (or the one question named only) and
// prints it.
func replay(ctx context.Context, w io.Writer, d *deskEnv, s *desk.Script, only string) error {
	// Writes get a fixed time of day, so the session prints the same on
	// every run.
	d.tools.Clock = func() time.Time { return d.db.Today.Add(14*time.Hour + 5*time.Minute) }
	fmt.Fprintf(w, "The model's one tool runs Ruby in glovebox; the program can call %s and nothing else.\n",
		strings.Join(d.rt.Tools(), ", "))
	n := 0
	for i, q := range s.Questions {
		if only != "" && q.ID != only {
			continue
		}
		n++
		p, err := d.tools.Profile(desk.WithCustomer(ctx, q.Customer))
		if err != nil {
			return fmt.Errorf("customer %d: %w", q.Customer, err)
		}
		fmt.Fprintf(w, "\n━━━ %d/%d %s · customer %d, %s (%s plan) ━━━\n", i+1, len(s.Questions), q.ID, p.ID, p.Name, p.Plan)
		out, err := q.Run(ctx, d.rt)
		if out != nil {
			printOutcome(w, out)
		}
		if err != nil {
			return fmt.Errorf("%w\n(the script expects a fresh database from the default seed; omit --db for one)", err)
		}
	}
	if n == 0 {
		return fmt.Errorf("the script has no question %q", only)
	}
	return nil
}

// printOutcome prints a question, each attempt's code, tool calls and
// result JSON, and the answer.
func printOutcome(w io.Writer, out *desk.Outcome) {
	fmt.Fprintf(w, "\nCustomer: %s\n", out.Question.Ask)
	for i, res := range out.Results {
		a := out.Question.Attempts[i]
		if a.Thought != "" {
			fmt.Fprintf(w, "\n(model reads the result: %s)\n", strings.TrimSpace(a.Thought))
		}
		fmt.Fprintf(w, "\nModel runs:\n%s", indent(a.Code))
		if a.Limits.Fuel != 0 {
			fmt.Fprintf(w, "    (with this program's fuel capped at %d)\n", a.Limits.Fuel)
		}
		if len(res.ToolCalls) > 0 {
			fmt.Fprintf(w, "Tool calls:\n%s", indent(summarizeCalls(res.ToolCalls)))
		}
		b, err := modelJSON(res)
		if err != nil {
			b = []byte(err.Error())
		}
		fmt.Fprintf(w, "Result JSON:\n%s", indent(string(b)))
	}
	if out.Answer != "" {
		fmt.Fprintf(w, "\nModel: %s\n", strings.ReplaceAll(out.Answer, "\n", "\n       "))
	}
}

// modelJSON is the result as the model receives it: Result.MarshalJSON,
// fields in their order, without the tool-call transcript, which is for
// the host (it is printed above the result instead).
func modelJSON(res *glovebox.Result) ([]byte, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	out := []byte{'{'}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if key == "tool_calls" {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = fmt.Appendf(out, "%q:%s", key, v)
	}
	return append(out, '}'), nil
}

// summarizeCalls lists calls one per line as name(args) → outcome, runs
// of more than three calls to one tool shortened to their first two.
func summarizeCalls(calls []glovebox.ToolCall) string {
	var b strings.Builder
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j].Name == calls[i].Name {
			j++
		}
		shown := j
		if j-i > 3 {
			shown = i + 2
		}
		for _, c := range calls[i:shown] {
			fmt.Fprintf(&b, "%s → %s\n", callString(c), outcomeString(c))
		}
		if shown < j {
			fmt.Fprintf(&b, "… and %d more calls to %s\n", j-shown, calls[i].Name)
		}
		i = j
	}
	return b.String()
}

func callString(c glovebox.ToolCall) string {
	var args []string
	for _, a := range c.Args.Positional {
		args = append(args, compact(a, 60))
	}
	for _, k := range sortedKeys(c.Args.Keyword) {
		args = append(args, k+": "+compact(c.Args.Keyword[k], 60))
	}
	return c.Name + "(" + strings.Join(args, ", ") + ")"
}

func outcomeString(c glovebox.ToolCall) string {
	switch {
	case c.Error != "":
		return "error: " + c.Error
	case c.Elided:
		return "(data not kept)"
	}
	if v := reflect.ValueOf(c.Result); v.Kind() == reflect.Slice {
		if v.Len() == 1 {
			return "1 result"
		}
		return fmt.Sprintf("%d results", v.Len())
	}
	return compact(c.Result, 100)
}

// compact is v as JSON, cut to about max characters.
func compact(v any, max int) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "…"
	}
	return s
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}

// evalOne runs one program as o.customer and prints its result.
func evalOne(ctx context.Context, w io.Writer, d *deskEnv, o options) error {
	ctx = desk.WithCustomer(ctx, o.customer)
	if _, err := d.tools.Profile(ctx); err != nil {
		var n int64
		d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM customers`).Scan(&n)
		return fmt.Errorf("no customer %d in the database (customers are 1 to %d)", o.customer, n)
	}
	res, err := d.rt.Eval(ctx, o.code)
	if err != nil {
		return err
	}
	if o.json {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
	} else {
		if len(res.ToolCalls) > 0 {
			fmt.Fprintf(w, "Tool calls:\n%s", indent(summarizeCalls(res.ToolCalls)))
		}
		if res.Stdout != "" {
			fmt.Fprint(w, res.Stdout)
		}
		if res.Status == glovebox.StatusOK {
			fmt.Fprintf(w, "=> %s\n", compact(res.Value, 1<<20))
		} else {
			fmt.Fprintf(w, "%s: %s: %s\n", res.Status, res.Error.Class, res.Error.Message)
		}
	}
	if res.Status != glovebox.StatusOK {
		return exitCode(1)
	}
	return nil
}
