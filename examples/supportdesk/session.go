package main

import (
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
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
)

// replay runs the scripted session (or the one question named only) and
// prints it.
func replay(ctx context.Context, w io.Writer, d *deskEnv, s *desk.Script, only string) error {
	// Writes get a fixed time of day, so the session prints the same on
	// every run.
	d.tools.Clock = func() time.Time { return d.db.Today.Add(14*time.Hour + 5*time.Minute) }
	fmt.Fprintf(w, "The model (scripted: %s) has one tool, %s; its Ruby can call %s and nothing else.\n",
		"script.yaml", codemode.DefaultName, strings.Join(d.rt.Tools(), ", "))
	n := 0
	for i, q := range s.Questions {
		if only != "" && q.ID != only {
			continue
		}
		n++
		if err := heading(ctx, w, d, fmt.Sprintf("%d/%d %s", i+1, len(s.Questions), q.ID), q.Customer); err != nil {
			return err
		}
		out, err := q.Run(ctx, d.rt)
		if out != nil {
			ex := exchange{ask: q.Ask, answer: out.Answer}
			for i, co := range out.Attempts {
				a := q.Attempts[i]
				ex.steps = append(ex.steps, step{thought: a.Thought, code: a.Code, fuel: a.Limits.Fuel, outcome: co})
			}
			printExchange(w, ex)
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

// heading prints the line that opens a question: its label and who asks.
func heading(ctx context.Context, w io.Writer, d *deskEnv, label string, customer int64) error {
	p, err := d.tools.Profile(desk.WithCustomer(ctx, customer))
	if err != nil {
		return fmt.Errorf("customer %d: %w", customer, err)
	}
	fmt.Fprintf(w, "\n━━━ %s · customer %d, %s (%s plan) ━━━\n", label, p.ID, p.Name, p.Plan)
	return nil
}

// exchange is one question and what the model did about it.
type exchange struct {
	ask    string
	steps  []step
	answer string
}

// step is one program the model ran.
type step struct {
	thought string // what the model concluded before it, if known
	code    string
	fuel    uint64 // a per-program fuel cap, if any
	outcome *codemode.Outcome
}

// printExchange prints a question, each program with its tool calls and
// the result JSON the model read, and the answer.
func printExchange(w io.Writer, ex exchange) {
	fmt.Fprintf(w, "\nCustomer: %s\n", ex.ask)
	for _, s := range ex.steps {
		if s.thought != "" {
			fmt.Fprintf(w, "\n(model reads the result: %s)\n", strings.TrimSpace(s.thought))
		}
		fmt.Fprintf(w, "\nModel runs:\n%s", indent(s.code))
		if s.fuel != 0 {
			fmt.Fprintf(w, "    (with this program's fuel capped at %d)\n", s.fuel)
		}
		if res := s.outcome.Result; res != nil && len(res.ToolCalls) > 0 {
			fmt.Fprintf(w, "Tool calls:\n%s", indent(summarizeCalls(res.ToolCalls)))
		}
		fmt.Fprintf(w, "Result JSON:\n%s", indent(string(s.outcome.Output)))
	}
	if ex.answer != "" {
		fmt.Fprintf(w, "\nModel: %s\n", strings.ReplaceAll(strings.TrimSpace(ex.answer), "\n", "\n       "))
	}
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
