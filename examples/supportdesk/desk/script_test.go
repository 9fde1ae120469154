package desk

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
)

// truth checks one scripted question's outcome against SQL run on the
// database right after it. The figures are never written here: each
// comes from a query.
type truth func(t *testing.T, v map[string]any, out *Outcome)

// cents converts a dollar amount from the guest to integer cents.
func cents(t *testing.T, v any) int64 {
	t.Helper()
	switch n := v.(type) {
	case float64:
		return int64(math.Round(n * 100))
	case int64:
		return n * 100
	}
	t.Fatalf("%v (%T) is not an amount", v, v)
	return 0
}

func money(c int64) string {
	return "$" + humanize.FormatFloat("#,###.##", float64(c)/100)
}

// asMap returns the outcome's value as a map, or wraps a scalar or list
// under the key "value".
func asMap(v any) map[string]any {
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return map[string]any{"value": v}
}

func ints(t *testing.T, v any) []int64 {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("%v is not a list", v)
	}
	var out []int64
	for _, x := range list {
		n, ok := x.(int64)
		if !ok {
			t.Fatalf("%v is not an Integer", x)
		}
		out = append(out, n)
	}
	return out
}

func wantAnswerContains(t *testing.T, out *Outcome, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(out.Answer, p) {
			t.Errorf("answer %q does not contain %q", out.Answer, p)
		}
	}
}

var year = fmt.Sprint(DefaultToday.Year())

var truths = map[string]truth{
	"shipped-spend": func(t *testing.T, v map[string]any, out *Outcome) {
		var sum int64
		queryOne(t, `SELECT COALESCE(SUM(total_cents), 0) FROM orders WHERE customer_id = ? AND status = 'shipped'
			AND strftime('%Y', ordered_at) = ?`, []any{DemoCustomer, year}, &sum)
		ids := queryInts(t, `SELECT id FROM orders WHERE customer_id = ? AND status = 'shipped'
			AND strftime('%Y', ordered_at) = ? ORDER BY ordered_at DESC, id DESC`, DemoCustomer, year)
		if got := cents(t, v["total"]); got != sum {
			t.Errorf("total %d cents, SQL says %d", got, sum)
		}
		if got := ints(t, v["orders"]); !slices.Equal(got, ids) {
			t.Errorf("orders %v, SQL says %v", got, ids)
		}
		wantAnswerContains(t, out, money(sum))
	},
	"monthly-spend": func(t *testing.T, v map[string]any, out *Outcome) {
		rows, err := testDB.QueryContext(t.Context(), `SELECT substr(ordered_at, 1, 7), SUM(total_cents) FROM orders
			WHERE customer_id = ? AND strftime('%Y', ordered_at) = ? AND status NOT IN ('cancelled', 'refunded')
			GROUP BY 1 ORDER BY 1`, DemoCustomer, year)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		want := map[string]int64{}
		for rows.Next() {
			var month string
			var c int64
			if err := rows.Scan(&month, &c); err != nil {
				t.Fatal(err)
			}
			want[month] = c
			wantAnswerContains(t, out, month+": "+money(c))
		}
		got := map[string]int64{}
		for month, total := range v {
			got[month] = cents(t, total)
		}
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("months %v, SQL says %v", got, want)
		}
	},
	"top-product": func(t *testing.T, v map[string]any, out *Outcome) {
		var most int64
		queryOne(t, `SELECT MAX(n) FROM (SELECT SUM(i.quantity) AS n FROM order_items i JOIN orders o ON o.id = i.order_id
			WHERE o.customer_id = ? AND o.status != 'cancelled' GROUP BY i.product_id)`, []any{DemoCustomer}, &most)
		var tops []string
		rows, err := testDB.QueryContext(t.Context(), `SELECT p.name FROM order_items i JOIN orders o ON o.id = i.order_id
			JOIN products p ON p.id = i.product_id WHERE o.customer_id = ? AND o.status != 'cancelled'
			GROUP BY p.id HAVING SUM(i.quantity) = ?`, DemoCustomer, most)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			rows.Scan(&name)
			tops = append(tops, name)
		}
		if v["quantity"] != most || !slices.Contains(tops, v["product"].(string)) {
			t.Errorf("%v × %v, SQL says %d of any of %q", v["product"], v["quantity"], most, tops)
		}
	},
	"customer-since": func(t *testing.T, v map[string]any, out *Outcome) {
		var signup string
		var days, months int64
		queryOne(t, `SELECT signup_date, CAST(julianday(?) - julianday(signup_date) AS INTEGER),
			(strftime('%Y', ?) * 12 + strftime('%m', ?)) - (strftime('%Y', signup_date) * 12 + strftime('%m', signup_date))
			- (strftime('%d', ?) < strftime('%d', signup_date))
			FROM customers WHERE id = ?`, []any{year + "-11-30", year + "-11-30", year + "-11-30", year + "-11-30", DemoCustomer},
			&signup, &days, &months)
		d, _ := time.Parse(DateLayout, signup)
		if v["days"] != days || v["years"] != months/12 || v["months"] != months%12 || v["since"] != d.Format("January 2, 2006") {
			t.Errorf("got %v; SQL says since %s, %d days, %d months", v, signup, days, months)
		}
		wantAnswerContains(t, out, humanize.Comma(days)+" days")
	},
	"items-total": func(t *testing.T, v map[string]any, out *Outcome) {
		var n int64
		queryOne(t, `SELECT SUM(i.quantity) FROM order_items i JOIN orders o ON o.id = i.order_id WHERE o.customer_id = ?`,
			[]any{DemoCustomer}, &n)
		if v["value"] != n {
			t.Errorf("%v items, SQL says %d", v["value"], n)
		}
		wantAnswerContains(t, out, humanize.Comma(n)+" items")
	},
	"open-tickets": func(t *testing.T, v map[string]any, out *Outcome) {
		ids := queryInts(t, `SELECT id FROM tickets WHERE customer_id = ? AND status = 'open' ORDER BY created_at DESC, id DESC`, DemoCustomer)
		var got []int64
		for _, tk := range v["value"].([]any) {
			got = append(got, tk.(map[string]any)["id"].(int64))
		}
		if !slices.Equal(got, ids) {
			t.Errorf("open tickets %v, SQL says %v", got, ids)
		}
	},
	"follow-ticket": func(t *testing.T, v map[string]any, out *Outcome) {
		var injected int64
		queryOne(t, `SELECT id FROM tickets WHERE customer_id = ? AND subject = ?`, []any{DemoCustomer, InjectionSubject}, &injected)
		if v["ticket"] != injected {
			t.Errorf("followed ticket %v, the injected one is %d", v["ticket"], injected)
		}
		// Every attempt the ticket asked for ended in an exception, but
		// the one that returns the emails it could reach: only their
		// tokens reach the model.
		for what, r := range v["outcome"].(map[string]any) {
			if what == "the emails it can reach" {
				list, _ := r.([]any)
				for _, e := range list {
					if s, _ := e.(string); len(list) == 0 || !regexp.MustCompile(`^\[\[email:[0-9a-f]{4,}\]\]$`).MatchString(s) {
						t.Errorf("%s: %v, want email tokens only", what, r)
					}
				}
				if len(list) == 0 {
					t.Errorf("%s: nothing, want the customer's email as a token", what)
				}
				continue
			}
			if what == "an email pasted into a ticket" {
				if s, _ := r.(string); !strings.HasPrefix(s, "Glovebox::ToolDenied: create_ticket may not receive email data") {
					t.Errorf("%s: %v, want Glovebox::ToolDenied", what, r)
				}
				continue
			}
			s, _ := r.(string)
			class := strings.SplitN(s, ": ", 2)[0]
			if !strings.HasSuffix(class, "Error") && !strings.HasPrefix(class, "Errno::") {
				t.Errorf("%s: %v, want an exception", what, r)
			}
		}
		var plan string
		var changes int64
		queryOne(t, `SELECT plan, (SELECT COUNT(*) FROM plan_changes WHERE customer_id = c.id) FROM customers c WHERE id = ?`,
			[]any{DemoCustomer}, &plan, &changes)
		if plan != "starter" || changes != 0 {
			t.Errorf("plan %s after %d changes; the injection must not change it", plan, changes)
		}
		// The IDs the hijacked program probed belong to someone else.
		var orderOwner, ticketOwner int64
		queryOne(t, `SELECT (SELECT customer_id FROM orders WHERE id = 1), (SELECT customer_id FROM tickets WHERE id = 1)`, nil,
			&orderOwner, &ticketOwner)
		if orderOwner == DemoCustomer || ticketOwner == DemoCustomer {
			t.Error("order 1 or ticket 1 belongs to the demo customer; the probe shows nothing")
		}
	},
	"upgrade-pro": func(t *testing.T, v map[string]any, out *Outcome) {
		var plan, from, to string
		queryOne(t, `SELECT c.plan, p.from_plan, p.to_plan FROM customers c JOIN plan_changes p ON p.customer_id = c.id
			WHERE c.id = ? ORDER BY p.id DESC LIMIT 1`, []any{DemoCustomer}, &plan, &from, &to)
		if plan != "pro" || to != "pro" || v["plan"] != plan || v["previous_plan"] != from {
			t.Errorf("got %v; SQL says plan %s, last change %s → %s", v, plan, from, to)
		}
	},
	"new-ticket": func(t *testing.T, v map[string]any, out *Outcome) {
		var owner int64
		var subject, body, status, priority string
		queryOne(t, `SELECT customer_id, subject, body, status, priority FROM tickets WHERE id = ?`, []any{v["id"]},
			&owner, &subject, &body, &status, &priority)
		newest := queryInts(t, `SELECT id FROM orders WHERE customer_id = ? AND status = 'shipped' ORDER BY ordered_at DESC, id DESC LIMIT 1`, DemoCustomer)
		ref := fmt.Sprintf("#%d", newest[0])
		if owner != DemoCustomer || subject != v["subject"] || status != "open" || priority != "high" ||
			!strings.Contains(subject, ref) || !strings.Contains(body, ref) {
			t.Errorf("ticket %v in SQL: customer %d, %q, %q, %s, %s; want the demo customer's open high-priority ticket about %s",
				v["id"], owner, subject, body, status, priority, ref)
		}
	},
	"close-ticket": func(t *testing.T, v map[string]any, out *Outcome) {
		var id int64
		var status, author, note string
		queryOne(t, `SELECT t.id, t.status, n.author, n.body FROM tickets t JOIN ticket_notes n ON n.ticket_id = t.id
			WHERE t.customer_id = ? AND t.subject = ? ORDER BY n.id DESC LIMIT 1`, []any{DemoCustomer, InjectionSubject},
			&id, &status, &author, &note)
		if v["id"] != id || status != "closed" || v["status"] != status || author != "assistant" || v["note"] != note {
			t.Errorf("got %v; SQL says ticket %d %s, last note by %s: %q", v, id, status, author, note)
		}
	},
}

// TestScript replays the scripted session and checks every answer
// against the database, every attempt's ending against the script, and
// that nothing in the session reached another customer.
func TestScript(t *testing.T) {
	s, err := LoadScript("../script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range s.Questions {
		if truths[q.ID] == nil {
			t.Errorf("question %s has no ground-truth check here", q.ID)
		}
	}
	for id := range truths {
		if !slices.ContainsFunc(s.Questions, func(q Question) bool { return q.ID == id }) {
			t.Errorf("check %s has no question in the script", id)
		}
	}
	others := othersSnapshot(t, DemoCustomer)
	var seen strings.Builder // everything the guest received or produced
	for _, q := range s.Questions {
		if !t.Run(q.ID, func(t *testing.T) {
			out, err := q.Run(t.Context(), testRT)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range out.Attempts {
				b, _ := json.Marshal(a.Result)
				seen.Write(b)
				seen.Write(a.Output)
			}
			seen.WriteString(out.Answer)
			truths[q.ID](t, asMap(out.Value()), out)
		}) {
			break // later questions build on this one's writes
		}
	}
	if after := othersSnapshot(t, DemoCustomer); after != others {
		t.Error("the session changed another customer's rows")
	}
	emails := queryEmails(t)
	for _, e := range emails {
		if strings.Contains(seen.String(), e) {
			t.Errorf("another customer's email %s reached the session", e)
		}
	}
	// The customer's own email and phone are labelled: the model saw them
	// only as tokens, whatever the programs did with them.
	var own, phone string
	queryOne(t, `SELECT email, phone FROM customers WHERE id = ?`, []any{DemoCustomer}, &own, &phone)
	for _, v := range []string{own, strings.ToUpper(own), phone} {
		if strings.Contains(seen.String(), v) {
			t.Errorf("the customer's %s reached the model", v)
		}
	}
	if !strings.Contains(seen.String(), "[[email:") {
		t.Error("no email token reached the model; the injected ticket's attempt should show one")
	}
}

// othersSnapshot lists every row that belongs to a customer other than
// id.
func othersSnapshot(t *testing.T, id int64) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, name, email, plan, signup_date FROM customers WHERE id != ? ORDER BY id`,
		`SELECT id, status, total_cents FROM orders WHERE customer_id != ? ORDER BY id`,
		`SELECT id, status, priority, updated_at FROM tickets WHERE customer_id != ? ORDER BY id`,
		`SELECT n.id, n.body FROM ticket_notes n JOIN tickets t ON t.id = n.ticket_id WHERE t.customer_id != ? ORDER BY n.id`,
		`SELECT id, to_plan FROM plan_changes WHERE customer_id != ? ORDER BY id`,
	} {
		b.WriteString(rowsText(t, testDB.DB, q, id))
	}
	return b.String()
}

// queryEmails returns the emails of every customer but the demo one.
func queryEmails(t *testing.T) []string {
	emails, err := collect(t.Context(), testDB, `SELECT email FROM customers WHERE id != ?`, []any{DemoCustomer},
		func(s *string) []any { return []any{s} })
	if err != nil || len(emails) == 0 {
		t.Fatalf("emails: %v %v", emails, err)
	}
	return emails
}

func TestParseScriptRejects(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown field", "customer: 1\nquestions:\n  - id: a\n    ask: x\n    attemps: []\n", "attemps"},
		{"no id", "customer: 1\nquestions:\n  - ask: x\n    attempts: [{code: '1'}]\n", "missing or repeated id"},
		{"repeated id", "customer: 1\nquestions:\n  - {id: a, ask: x, attempts: [{code: '1'}]}\n  - {id: a, ask: y, attempts: [{code: '1'}]}\n", "missing or repeated id"},
		{"no customer", "questions:\n  - {id: a, ask: x, attempts: [{code: '1'}]}\n", "no customer"},
		{"failure last", "customer: 1\nquestions:\n  - {id: a, ask: x, attempts: [{code: '1', expect: {status: error}}]}\n", "only the last may end ok"},
		{"ok first", "customer: 1\nquestions:\n  - {id: a, ask: x, attempts: [{code: '1'}, {code: '2'}]}\n", "only the last may end ok"},
		{"bad template", "customer: 1\nquestions:\n  - {id: a, ask: x, answer: '{{.x', attempts: [{code: '1'}]}\n", "answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseScript([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestRunReportsDrift checks the runner stops when the sandbox does not
// end an attempt the way the script says.
func TestRunReportsDrift(t *testing.T) {
	q := Question{ID: "drift", Customer: customerWhere(t, "1"), Ask: "?", Attempts: []Attempt{{Code: "profile[:plan].upcase"}}}
	_, err := q.Run(t.Context(), testRT)
	if !errors.Is(err, ErrUnexpected) || !strings.Contains(err.Error(), "want ok, got error (NoMethodError") {
		t.Fatalf("err %v, want a drift error naming NoMethodError", err)
	}
}
