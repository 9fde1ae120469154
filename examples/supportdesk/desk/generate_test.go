package desk

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// dump hashes every row of every table, in primary-key order.
func dump(t *testing.T, db *sql.DB) string {
	t.Helper()
	h := sha256.New()
	for _, table := range []string{"meta", "customers", "plan_changes", "products", "orders", "order_items", "tickets", "ticket_notes"} {
		fmt.Fprintf(h, "%s\n%s", table, rowsText(t, db, `SELECT * FROM `+table+` ORDER BY 1`))
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// rowsText returns every row of a query, one per line.
func rowsText(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var b strings.Builder
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%q\n", vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func generateInto(t *testing.T, opts Options) *DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "desk.db")
	if _, err := Generate(t.Context(), path, opts); err != nil {
		t.Fatal(err)
	}
	db, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestGenerateIsReproducible(t *testing.T) {
	small := Options{Seed: 7, Customers: 80}
	a, b := dump(t, generateInto(t, small).DB), dump(t, generateInto(t, small).DB)
	if a != b {
		t.Fatal("the same seed gave different data")
	}
	if c := dump(t, generateInto(t, Options{Seed: 8, Customers: 80}).DB); c == a {
		t.Fatal("another seed gave the same data")
	}
}

func TestGenerateRefusesExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "desk.db")
	if _, err := Generate(t.Context(), path, Options{Customers: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(t.Context(), path, Options{Customers: 50}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second Generate: %v, want an 'already exists' error", err)
	}
}

func TestOpenRefusesOtherFiles(t *testing.T) {
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing.db")); err == nil {
		t.Fatal("opened a missing file")
	}
}

// TestGeneratedData checks the default dataset has the volume and shape
// the example promises.
func TestGeneratedData(t *testing.T) {
	count := func(query string, args ...any) int64 {
		var n int64
		queryOne(t, query, args, &n)
		return n
	}
	for _, c := range []struct {
		what  string
		query string
		min   int64
	}{
		{"customers", `SELECT COUNT(*) FROM customers`, 300},
		{"orders", `SELECT COUNT(*) FROM orders`, 2000},
		{"line items", `SELECT COUNT(*) FROM order_items`, 4000},
		{"tickets", `SELECT COUNT(*) FROM tickets`, 200},
		{"distinct plans", `SELECT COUNT(DISTINCT plan) FROM customers`, int64(len(Plans))},
		{"distinct order statuses", `SELECT COUNT(DISTINCT status) FROM orders`, int64(len(OrderStatuses))},
		{"distinct ticket statuses", `SELECT COUNT(DISTINCT status) FROM tickets`, int64(len(TicketStatuses))},
		{"orders in the first year", `SELECT COUNT(*) FROM orders WHERE ordered_at < '2025-12-01'`, 500},
		{"orders in the second year", `SELECT COUNT(*) FROM orders WHERE ordered_at >= '2025-12-01'`, 500},
	} {
		if n := count(c.query); n < c.min {
			t.Errorf("%s: %d, want at least %d", c.what, n, c.min)
		}
	}
	if n := count(`SELECT COUNT(*) FROM orders WHERE ordered_at > ? OR ordered_at <= date(?, '-2 years')`,
		testDB.Today.Format(DateLayout), testDB.Today.Format(DateLayout)); n != 0 {
		t.Errorf("%d orders outside the two years before today", n)
	}
	if n := count(`SELECT COUNT(*) FROM orders o WHERE total_cents !=
		(SELECT SUM(quantity * unit_price_cents) FROM order_items WHERE order_id = o.id)`); n != 0 {
		t.Errorf("%d orders whose total is not the sum of their lines", n)
	}
	if n := count(`SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.ordered_at < c.signup_date`); n != 0 {
		t.Errorf("%d orders before their customer signed up", n)
	}
	if n := count(`SELECT COUNT(*) FROM tickets WHERE body LIKE '%Ignore all previous instructions%'`); n != 1 {
		t.Errorf("%d tickets carry the injection, want 1", n)
	}
	if n := count(`SELECT COUNT(*) FROM tickets WHERE subject = ? AND customer_id = ? AND status = 'open'`, InjectionSubject, DemoCustomer); n != 1 {
		t.Errorf("the demo customer has %d open injection tickets, want 1", n)
	}
	if n := count(`SELECT COUNT(*) FROM orders WHERE customer_id = ? AND status = 'shipped' AND ordered_at LIKE ?`,
		DemoCustomer, fmt.Sprintf("%d-%%", testDB.Today.Year())); n < 1 {
		t.Error("the demo customer has no shipped order this year: the headline question would be empty")
	}
	// IDs grow with time, as in a real shop.
	if n := count(`SELECT COUNT(*) FROM orders a JOIN orders b ON b.id = a.id + 1 WHERE b.ordered_at < a.ordered_at`); n != 0 {
		t.Errorf("%d orders dated before the order preceding them", n)
	}
}
