// Package desk is the support desk behind the supportdesk example: a
// SQLite database of customers, orders and tickets generated from a seed
// ([Generate]), the tools a model may use on behalf of one customer
// ([Tools]), and the scripted model that exercises them ([Script]).
//
// # Data
//
// The database holds customers (name, email, plan, signup date),
// products, orders over the two years before the dataset's "today" with
// their line items, and support tickets with notes. Money is stored in
// integer cents and handed to the guest as dollars (a Float with two
// decimals). Dates are ISO 8601 strings: "2026-11-30" for days,
// "2026-11-30T09:15:00Z" for instants.
//
// # Scope
//
// Every tool acts for the customer [WithCustomer] put in the eval's
// context, which the host sets and guest code cannot reach. No tool
// takes a customer ID, and an order or ticket ID that belongs to someone
// else is reported exactly like one that does not exist.
package desk

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// schema creates the tables. Foreign keys are declared for the reader and
// enforced (see Open).
const schema = `
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
CREATE TABLE customers (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL,
	email       TEXT NOT NULL UNIQUE,
	phone       TEXT NOT NULL,
	plan        TEXT NOT NULL CHECK (plan IN ('free', 'starter', 'pro', 'enterprise')),
	signup_date TEXT NOT NULL
);
CREATE TABLE plan_changes (
	id          INTEGER PRIMARY KEY,
	customer_id INTEGER NOT NULL REFERENCES customers(id),
	from_plan   TEXT NOT NULL,
	to_plan     TEXT NOT NULL,
	changed_at  TEXT NOT NULL
);
CREATE TABLE products (
	id          INTEGER PRIMARY KEY,
	sku         TEXT NOT NULL UNIQUE,
	name        TEXT NOT NULL,
	price_cents INTEGER NOT NULL CHECK (price_cents > 0)
);
CREATE TABLE orders (
	id          INTEGER PRIMARY KEY,
	customer_id INTEGER NOT NULL REFERENCES customers(id),
	status      TEXT NOT NULL CHECK (status IN ('pending', 'paid', 'shipped', 'delivered', 'cancelled', 'refunded')),
	ordered_at  TEXT NOT NULL,
	total_cents INTEGER NOT NULL
);
CREATE INDEX orders_customer ON orders (customer_id, ordered_at);
CREATE TABLE order_items (
	id               INTEGER PRIMARY KEY,
	order_id         INTEGER NOT NULL REFERENCES orders(id),
	product_id       INTEGER NOT NULL REFERENCES products(id),
	quantity         INTEGER NOT NULL CHECK (quantity > 0),
	unit_price_cents INTEGER NOT NULL
);
CREATE INDEX order_items_order ON order_items (order_id);
CREATE TABLE tickets (
	id          INTEGER PRIMARY KEY,
	customer_id INTEGER NOT NULL REFERENCES customers(id),
	subject     TEXT NOT NULL,
	body        TEXT NOT NULL,
	status      TEXT NOT NULL CHECK (status IN ('open', 'pending', 'closed')),
	priority    TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
	created_at  TEXT NOT NULL,
	updated_at  TEXT NOT NULL
);
CREATE INDEX tickets_customer ON tickets (customer_id, created_at);
CREATE TABLE ticket_notes (
	id         INTEGER PRIMARY KEY,
	ticket_id  INTEGER NOT NULL REFERENCES tickets(id),
	author     TEXT NOT NULL,
	body       TEXT NOT NULL,
	created_at TEXT NOT NULL
);
CREATE INDEX ticket_notes_ticket ON ticket_notes (ticket_id);
`

// Date layouts used in the database and in tool results.
const (
	DateLayout    = "2006-01-02"
	InstantLayout = "2006-01-02T15:04:05Z"
)

// DB is an open support-desk database: the SQL handle (for the host's
// own queries) and the dataset's fixed "today", from which every relative
// date ("this year", "recent") is computed, so answers do not depend on
// the day the example runs.
type DB struct {
	*sql.DB
	Today time.Time
}

// Open opens the database at path, a file made by [Generate]. It fails if
// the file does not exist or is not such a database.
func Open(ctx context.Context, path string) (*DB, error) {
	db, err := openSQL(path)
	if err != nil {
		return nil, err
	}
	var s string
	if err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'today'`).Scan(&s); err != nil {
		db.Close()
		return nil, fmt.Errorf("desk: %s is not a support-desk database: %w", path, err)
	}
	today, err := time.Parse(DateLayout, s)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("desk: %s: bad date %q: %w", path, s, err)
	}
	return &DB{db, today}, nil
}

// openSQL opens the file at path, which must exist, with foreign keys
// enforced and one connection: SQLite serializes writers anyway, and one
// connection keeps the tools' transactions simple.
func openSQL(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("desk: open %s: %w", path, err)
	}
	return db, nil
}
