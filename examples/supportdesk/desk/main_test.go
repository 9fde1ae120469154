package desk

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// One database and one Runtime serve the whole test process. TestScript
// speaks for DemoCustomer and expects it untouched when it starts; every
// other test acts for other customers.
var (
	testDB    *DB
	testTools *Tools
	testRT    *glovebox.Runtime
)

// testLimits match the example's (examples/supportdesk Limits), with a
// longer timeout for a loaded machine.
var testLimits = glovebox.Limits{Timeout: 30 * time.Second, Fuel: 2_000_000_000}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "desk-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "desk.db")
	if _, err := Generate(ctx, path, Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if testDB, err = Open(ctx, path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testDB.Close()
	testTools = NewTools(testDB)
	testTools.Clock = func() time.Time { return testDB.Today.Add(14 * time.Hour) }
	var ts glovebox.Toolset
	if err := testTools.Register(&ts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testRT, err = glovebox.New(ctx, glovebox.Config{
		Tools:    &ts,
		Hooks:    glovebox.Hooks{SanitizeError: SanitizeError},
		Limits:   testLimits,
		PoolSize: -1,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testRT.Close()
	return m.Run()
}

// evalAs runs code as customer id and fails the test on a host error.
func evalAs(t *testing.T, id int64, code string) *glovebox.Result {
	t.Helper()
	res, err := testRT.Eval(WithCustomer(t.Context(), id), code)
	if err != nil {
		t.Fatalf("Eval: %v", err)
	}
	return res
}

// mustOK fails the test unless res ended ok.
func mustOK(t *testing.T, res *glovebox.Result) {
	t.Helper()
	if res.Status != glovebox.StatusOK {
		t.Fatalf("status %s: %+v", res.Status, res.Error)
	}
}

// queryOne scans the single row of a query into dest.
func queryOne(t *testing.T, query string, args []any, dest ...any) {
	t.Helper()
	if err := testDB.QueryRowContext(t.Context(), query, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// queryInts returns the first column of every row as int64.
func queryInts(t *testing.T, query string, args ...any) []int64 {
	t.Helper()
	ids, err := collect(t.Context(), testDB, query, args, func(id *int64) []any { return []any{id} })
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return ids
}

// customerWhere returns the first customer other than DemoCustomer
// matching a SQL condition on the customers table.
func customerWhere(t *testing.T, cond string, args ...any) int64 {
	t.Helper()
	var id int64
	err := testDB.QueryRowContext(t.Context(), `SELECT id FROM customers WHERE id != ? AND `+cond+` ORDER BY id LIMIT 1`,
		append([]any{DemoCustomer}, args...)...).Scan(&id)
	if err == sql.ErrNoRows {
		t.Fatalf("no customer with %s", cond)
	} else if err != nil {
		t.Fatal(err)
	}
	return id
}
