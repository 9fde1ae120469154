package desk

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

func TestToolNames(t *testing.T) {
	var ts glovebox.Toolset
	if err := NewTools(testDB).Register(&ts); err != nil {
		t.Fatal(err)
	}
	if got := ts.Names(); !slices.Equal(got, ToolNames) {
		t.Fatalf("exposed %v, want exactly %v", got, ToolNames)
	}
	if got := testRT.Tools(); !slices.Equal(got, ToolNames) {
		t.Fatalf("the runtime exposes %v, want exactly %v", got, ToolNames)
	}
}

// TestReadToolsAreScoped checks every read tool returns exactly the
// customer's own rows, as SQL counts them.
func TestReadToolsAreScoped(t *testing.T) {
	id := customerWhere(t, `id IN (SELECT customer_id FROM tickets GROUP BY 1 HAVING COUNT(*) >= 2)
		AND id IN (SELECT customer_id FROM orders GROUP BY 1 HAVING COUNT(*) >= 5)`)
	res := evalAs(t, id, `{ "me" => profile["id"], "orders" => orders.map { _1["id"] },
		"shipped" => orders(status: "shipped").map { _1["id"] },
		"last_year" => orders(year: 2025, status: %w[delivered refunded]).map { _1["id"] },
		"autumn" => orders(from: "2026-09-01", to: "2026-10-31").map { _1["id"] },
		"tickets" => tickets(limit: 50).map { _1["id"] }, "recent" => tickets.size,
		"lines" => orders.sum { |o| order_items(o["id"]).sum { _1["quantity"] } } }`)
	mustOK(t, res)
	v := res.Value.(map[string]any)
	for key, q := range map[string]string{
		"orders":    `SELECT id FROM orders WHERE customer_id = ? ORDER BY ordered_at DESC, id DESC`,
		"shipped":   `SELECT id FROM orders WHERE customer_id = ? AND status = 'shipped' ORDER BY ordered_at DESC, id DESC`,
		"last_year": `SELECT id FROM orders WHERE customer_id = ? AND ordered_at LIKE '2025-%' AND status IN ('delivered', 'refunded') ORDER BY ordered_at DESC, id DESC`,
		"autumn":    `SELECT id FROM orders WHERE customer_id = ? AND ordered_at BETWEEN '2026-09-01' AND '2026-10-31' ORDER BY ordered_at DESC, id DESC`,
		"tickets":   `SELECT id FROM tickets WHERE customer_id = ? ORDER BY created_at DESC, id DESC`,
	} {
		want := queryInts(t, q, id)
		if got := ints(t, v[key]); !slices.Equal(got, want) {
			t.Errorf("%s: %v, SQL says %v", key, got, want)
		}
	}
	var lines, recent int64
	queryOne(t, `SELECT SUM(i.quantity), MIN(10, (SELECT COUNT(*) FROM tickets WHERE customer_id = ?))
		FROM order_items i JOIN orders o ON o.id = i.order_id WHERE o.customer_id = ?`, []any{id, id}, &lines, &recent)
	if v["me"] != id || v["lines"] != lines || v["recent"] != recent {
		t.Errorf("profile %v, %v items, %v recent tickets; SQL says %d, %d, %d", v["me"], v["lines"], v["recent"], id, lines, recent)
	}
}

// TestNoToolReachesAnotherCustomer probes every order and ticket ID with
// the tools that take one: only the customer's own answer, and another
// customer's ID is refused with the same words as one that does not
// exist.
func TestNoToolReachesAnotherCustomer(t *testing.T) {
	id := customerWhere(t, `id IN (SELECT customer_id FROM tickets WHERE id <= 120) AND id IN (SELECT customer_id FROM orders WHERE id <= 300)`)
	before := othersSnapshot(t, id)
	res := evalAs(t, id, `
		probe = ->(ids, &call) do
			ids.each_with_object({}) do |i, seen|
				call.(i)
				seen[i] = "ok"
			rescue Glovebox::ToolError => e
				seen[i] = e.message
			end
		end
		{ "orders" => probe.(1..300) { |i| order_items(i) },
		  "tickets" => probe.(1..120) { |i| update_ticket(i, priority: "low") },
		  "missing_order" => probe.([10_000_000]) { |i| order_items(i) }[10_000_000],
		  "missing_ticket" => probe.([10_000_000]) { |i| update_ticket(i, note: "hi") }[10_000_000] }`)
	mustOK(t, res)
	v := res.Value.(map[string]any)
	if v["missing_order"] != "no order #10000000 on this account" || v["missing_ticket"] != "no ticket #10000000 on this account" {
		t.Fatalf("refusals for missing IDs: %v, %v", v["missing_order"], v["missing_ticket"])
	}
	for _, c := range []struct{ key, noun, owned string }{
		{"orders", "order", `SELECT id FROM orders WHERE customer_id = ? AND id <= 300`},
		{"tickets", "ticket", `SELECT id FROM tickets WHERE customer_id = ? AND id <= 120`},
	} {
		owned := queryInts(t, c.owned, id)
		var ok []int64
		for key, outcome := range v[c.key].(map[string]any) {
			var n int64
			fmt.Sscan(key, &n)
			switch outcome {
			case "ok":
				ok = append(ok, n)
			case fmt.Sprintf("no %s #%d on this account", c.noun, n):
			default:
				t.Errorf("%s %d: %q, want ok or the same refusal as a missing one", c.noun, n, outcome)
			}
		}
		slices.Sort(ok)
		if len(owned) == 0 || !slices.Equal(ok, owned) {
			t.Errorf("%s IDs the tools accepted: %v; the customer owns %v", c.noun, ok, owned)
		}
	}
	if othersSnapshot(t, id) != before {
		t.Error("probing changed another customer's rows")
	}
	// Every result the guest received was the customer's own.
	email := ""
	queryOne(t, `SELECT email FROM customers WHERE id = ?`, []any{id}, &email)
	transcript, _ := res.MarshalJSON()
	for _, e := range queryEmails(t) {
		if e != email && strings.Contains(string(transcript), e) {
			t.Errorf("another customer's email %s reached the guest", e)
		}
	}
}

// TestToolsFailClosedWithoutCustomer checks a host that forgot
// WithCustomer gets no data, and the guest a generic message.
func TestToolsFailClosedWithoutCustomer(t *testing.T) {
	res, err := testRT.Eval(t.Context(), `[profile, orders]`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusError || res.Error.Class != "Glovebox::ToolError" || res.Error.Message != InternalErrorMessage {
		t.Fatalf("got %s %+v, want ToolError %q", res.Status, res.Error, InternalErrorMessage)
	}
	if _, err := NewTools(testDB).Orders(context.Background(), nil); err != ErrNoCustomer {
		t.Fatalf("Orders without a customer: %v, want ErrNoCustomer", err)
	}
}

func TestSanitizeError(t *testing.T) {
	if got := SanitizeError("orders", &InputError{"year must be an Integer"}); got != "year must be an Integer" {
		t.Errorf("input error became %q", got)
	}
	if got := SanitizeError("orders", fmt.Errorf("sql: database is closed at /home/x/desk.db")); got != InternalErrorMessage {
		t.Errorf("host error became %q", got)
	}
}

// TestInputIsValidated runs each invalid call as the guest would make it
// and checks the exception the model reads, then that nothing changed.
func TestInputIsValidated(t *testing.T) {
	id := customerWhere(t, `plan = 'free' AND id IN (SELECT customer_id FROM tickets)`)
	var own, other int64
	queryOne(t, `SELECT (SELECT MIN(id) FROM tickets WHERE customer_id = ?), (SELECT MIN(id) FROM tickets WHERE customer_id != ?)`,
		[]any{id, id}, &own, &other)
	long := strings.Repeat("x", MaxBody+1)
	for _, c := range []struct{ code, class, message string }{
		{`change_plan("gold")`, "Glovebox::ToolError", `there is no plan "gold" (plans: free, starter, pro, enterprise)`},
		{`change_plan("Pro")`, "Glovebox::ToolError", `there is no plan "Pro"`},
		{`change_plan("enterprise")`, "Glovebox::ToolError", "arranged by the sales team"},
		{`change_plan("free")`, "Glovebox::ToolError", "already on the free plan"},
		{`change_plan(3)`, "ArgumentError", "cannot use an Integer as string"},
		{`change_plan(plan: "pro")`, "ArgumentError", "unknown keyword: plan (this tool takes no keywords)"},
		{`change_plan`, "ArgumentError", "wrong number of arguments (given 0, expected 1)"},
		{`create_ticket("", "My order never arrived, please help.")`, "Glovebox::ToolError", "subject must be 3 to 80 characters, not 0"},
		{`create_ticket("x" * 81, "My order never arrived, please help.")`, "Glovebox::ToolError", "subject must be 3 to 80 characters, not 81"},
		{`create_ticket("Two\nlines", "My order never arrived, please help.")`, "Glovebox::ToolError", "subject must be a single line"},
		{`create_ticket("Help", "  short  ")`, "Glovebox::ToolError", "body must be 10 to 5000 characters, not 5"},
		{`create_ticket("Help", "` + long + `")`, "Glovebox::ToolError", "body must be 10 to 5000 characters, not 5001"},
		{`create_ticket("Help", "My order never arrived, please help.", priority: "critical")`, "Glovebox::ToolError", `priority must be one of low, normal, high, urgent, not "critical"`},
		{`create_ticket("Help", "My order never arrived, please help.", cc: "boss@example.com")`, "Glovebox::ToolError", `create_ticket has no option "cc"`},
		{fmt.Sprintf(`update_ticket(%d)`, own), "Glovebox::ToolError", "nothing to change"},
		{fmt.Sprintf(`update_ticket(%d, status: "resolved")`, own), "Glovebox::ToolError", `status must be one of open, pending, closed, not "resolved"`},
		{fmt.Sprintf(`update_ticket(%d, priority: :high, status: "solved")`, own), "Glovebox::ToolError", `status must be one of open, pending, closed`},
		{fmt.Sprintf(`update_ticket(%d, note: "   ")`, own), "Glovebox::ToolError", "note must be 1 to 2000 characters, not 0"},
		{fmt.Sprintf(`update_ticket(%d, note: 42)`, own), "Glovebox::ToolError", "note must be a String, not 42"},
		{fmt.Sprintf(`update_ticket(%d, assignee: "me")`, own), "Glovebox::ToolError", `update_ticket has no field "assignee"`},
		{fmt.Sprintf(`update_ticket(%d, status: "closed")`, other), "Glovebox::ToolError", fmt.Sprintf("no ticket #%d on this account", other)},
		{`orders(status: "lost")`, "Glovebox::ToolError", `status must be one of pending, paid, shipped, delivered, cancelled, refunded, not "lost"`},
		{`orders(status: [])`, "Glovebox::ToolError", "status must name at least one"},
		{`orders(year: "2026")`, "Glovebox::ToolError", `year must be an Integer such as 2026, not "2026"`},
		{`orders(from: "last week")`, "Glovebox::ToolError", `from must be a date String "YYYY-MM-DD", not "last week"`},
		{`orders(customer_id: 1)`, "Glovebox::ToolError", `orders has no filter "customer_id"`},
		{`orders("shipped")`, "ArgumentError", "cannot use a String as map[string]interface {}"},
		{`tickets(limit: 0)`, "Glovebox::ToolError", "limit must be an Integer from 1 to 50, not 0"},
		{`tickets(status: "new")`, "Glovebox::ToolError", `status must be one of open, pending, closed, not "new"`},
		{`order_items("1")`, "ArgumentError", "cannot use a String as int64"},
	} {
		t.Run(c.code[:min(len(c.code), 50)], func(t *testing.T) {
			before := changes(t)
			res := evalAs(t, id, c.code)
			if res.Status != glovebox.StatusError || res.Error.Class != c.class || !strings.Contains(res.Error.Message, c.message) {
				t.Fatalf("got %s %+v, want %s containing %q", res.Status, res.Error, c.class, c.message)
			}
			if changes(t) != before {
				t.Fatal("a refused call changed the database")
			}
		})
	}
}

// TestWritesSucceed checks each write tool does what it says, as SQL
// sees it.
func TestWritesSucceed(t *testing.T) {
	id := customerWhere(t, `plan = 'starter' AND id IN (SELECT customer_id FROM tickets)`)
	before := changes(t)
	res := evalAs(t, id, `
		plan = change_plan("pro")
		t = create_ticket("  Dock flickers  ", "The USB-C dock flickers on my second monitor.", priority: "urgent")
		u = update_ticket(t["id"], status: "pending", priority: "normal", note: "Asked for the firmware version.")
		{ "plan" => plan, "created" => t, "updated" => u }`)
	mustOK(t, res)
	if changes(t) == before {
		t.Fatal("the change counter missed the writes; TestInputIsValidated relies on it")
	}
	v := res.Value.(map[string]any)
	var plan, from, to string
	queryOne(t, `SELECT c.plan, p.from_plan, p.to_plan FROM customers c JOIN plan_changes p ON p.customer_id = c.id WHERE c.id = ?`,
		[]any{id}, &plan, &from, &to)
	if plan != "pro" || from != "starter" || to != "pro" {
		t.Errorf("plan %s, change %s → %s; want pro, starter → pro", plan, from, to)
	}
	created := v["created"].(map[string]any)
	var subject, status, priority, author, note string
	queryOne(t, `SELECT t.subject, t.status, t.priority, n.author, n.body FROM tickets t JOIN ticket_notes n ON n.ticket_id = t.id
		WHERE t.id = ? AND t.customer_id = ?`, []any{created["id"], id}, &subject, &status, &priority, &author, &note)
	if subject != "Dock flickers" || created["status"] != "open" || created["priority"] != "urgent" ||
		status != "pending" || priority != "normal" || author != "assistant" || note != "Asked for the firmware version." {
		t.Errorf("ticket in SQL: %q %s %s, note by %s %q; created as %v", subject, status, priority, author, note, created)
	}
}

// TestOpenTicketCap checks a customer cannot open more than
// MaxOpenTickets unresolved tickets.
func TestOpenTicketCap(t *testing.T) {
	id := customerWhere(t, `id NOT IN (SELECT customer_id FROM tickets WHERE status != 'closed') AND id > 100`)
	res := evalAs(t, id, fmt.Sprintf(`(1..%d).map do |i|
		create_ticket("Question %%d" %% i, "Another question about my account.")["id"]
	rescue Glovebox::ToolError => e
		e.message
	end`, MaxOpenTickets+2))
	mustOK(t, res)
	got := res.Value.([]any)
	for i, x := range got {
		_, isID := x.(int64)
		if isID != (i < MaxOpenTickets) {
			t.Errorf("ticket %d: %v", i+1, x)
		}
	}
	if msg := fmt.Sprint(got[MaxOpenTickets]); !strings.Contains(msg, fmt.Sprintf("already has %d unresolved tickets", MaxOpenTickets)) {
		t.Errorf("refusal %q", msg)
	}
}

// changes counts the rows written through the database's one connection
// since it opened.
func changes(t *testing.T) int64 {
	t.Helper()
	var n int64
	queryOne(t, `SELECT total_changes()`, nil, &n)
	return n
}

// TestConcurrentCustomersStayApart runs evals for several customers at
// once on the one Runtime: each sees only its own customer, since the
// scope travels in each eval's context.
func TestConcurrentCustomersStayApart(t *testing.T) {
	ids := queryInts(t, `SELECT id FROM customers WHERE id IN (SELECT customer_id FROM orders) ORDER BY id LIMIT 8`)
	want := map[int64][]int64{}
	for _, id := range ids {
		want[id] = queryInts(t, `SELECT id FROM orders WHERE customer_id = ? ORDER BY ordered_at DESC, id DESC`, id)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids)*3)
	for range 3 {
		for _, id := range ids {
			wg.Go(func() {
				res, err := testRT.Eval(WithCustomer(t.Context(), id), `[profile["id"], orders.map { _1["id"] }]`)
				if err != nil || res.Status != glovebox.StatusOK {
					errs <- fmt.Errorf("customer %d: %v %v", id, err, res)
					return
				}
				v := res.Value.([]any)
				var got []int64
				for _, x := range v[1].([]any) {
					got = append(got, x.(int64))
				}
				if v[0] != id || !slices.Equal(got, want[id]) {
					errs <- fmt.Errorf("customer %d saw profile %v and orders %v, want %v", id, v[0], got, want[id])
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
