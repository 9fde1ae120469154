package desk

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox"
)

// ToolNames are the guest functions [Tools.Register] exposes, sorted.
// Everything else on [Tools] stays on the host.
var ToolNames = []string{
	"change_plan", "create_ticket", "order_items", "orders", "profile", "tickets", "update_ticket",
}

// Tools are the functions a model may call for one customer, the
// customer [WithCustomer] put in the eval's context. Results cross to the
// guest as Hashes with String keys (see the JSON tags of [Profile],
// [Order], [Item], [Ticket] and [PlanChange]).
//
// A refusal the model should read — bad input, another customer's order,
// a plan that cannot be chosen — is an [*InputError]; anything else is a
// host failure, which [SanitizeError] hides from the guest.
type Tools struct {
	db *DB
	// Clock gives the time recorded on writes. Nil means the dataset's
	// today at the current UTC time of day.
	Clock func() time.Time
}

// NewTools returns the tools over db.
func NewTools(db *DB) *Tools { return &Tools{db: db} }

// Register adds the tools named in [ToolNames] to ts, each documented
// for the model (see [glovebox.Toolset.Describe]), with the data-flow
// policy of [Label].
func (t *Tools) Register(ts *glovebox.Toolset) error {
	if err := t.RegisterUnlabelled(ts); err != nil {
		return err
	}
	return Label(ts)
}

// RegisterUnlabelled is Register without [Label]: the model then reads
// customers' emails and phone numbers as they are, and a ticket may carry
// them. glovebox bench uses it to measure what the policy costs.
func (t *Tools) RegisterUnlabelled(ts *glovebox.Toolset) error {
	if err := ts.Object(t, glovebox.Only(ToolNames...)); err != nil {
		return err
	}
	for _, name := range ToolNames {
		if err := ts.Describe(name, toolDocs[name]); err != nil {
			return err
		}
	}
	return nil
}

// Label sets the data-flow policy on the registered tools: the
// customer's email and phone number (and any email address in a ticket's
// text) are labelled, so the model sees them only as tokens, and no tool
// accepts them in its arguments, so a ticket body or note cannot carry
// them (see glovebox.Toolset.Label). Every tool keeps the default sink
// policy, which accepts no labelled kind.
func Label(ts *glovebox.Toolset) error {
	if err := ts.Label("profile",
		glovebox.Label{Kind: glovebox.KindEmail, Path: "email"},
		glovebox.Label{Kind: glovebox.KindPhone, Path: "phone"}); err != nil {
		return err
	}
	for _, name := range []string{"tickets", "create_ticket", "update_ticket"} {
		if err := ts.Label(name, glovebox.Label{Kind: glovebox.KindEmail, Find: glovebox.FindEmails}); err != nil {
			return err
		}
	}
	return nil
}

// keywords is the JSON Schema of an options Hash: the given properties,
// no others.
func keywords(props string) json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"additionalProperties":false}`)
}

func enum(values []string) string {
	b, _ := json.Marshal(values)
	return `{"enum":` + string(b) + `}`
}

// toolDocs document the tools for the model. The options Hashes are Go
// variadic parameters, so that they may be left out: the description
// says so, and that they are passed as keyword arguments.
var toolDocs = map[string]glovebox.ToolDoc{
	"profile": {
		Description: "The customer's account: id, name, email, phone, plan (" + strings.Join(Plans, ", ") + ") and signup_date (YYYY-MM-DD).",
	},
	"orders": {
		Description: "The customer's orders, newest first: id, status, ordered_at (YYYY-MM-DD), total in dollars (line items summed) and item_count (units). Without filters, every order.",
		Params: []glovebox.Param{{
			Name: "filters",
			Description: "Optional keyword arguments: status: (one status or an Array of them), year: (Integer), " +
				"from: and to: (dates YYYY-MM-DD, inclusive). An unknown filter raises Glovebox::ToolError.",
			Schema: keywords(`"status":{"anyOf":[` + enum(OrderStatuses) + `,{"type":"array","items":` + enum(OrderStatuses) + `}]},` +
				`"year":{"type":"integer"},"from":{"type":"string","format":"date"},"to":{"type":"string","format":"date"}`),
		}},
		Example: `orders(status: "shipped", year: 2026)`,
	},
	"order_items": {
		Description: "The lines of one of the customer's orders: sku, name, quantity, unit_price and line_total in dollars. Another customer's order, or a missing one, raises Glovebox::ToolError.",
		Params:      []glovebox.Param{{Name: "order_id", Description: "An order id from orders."}},
		Example:     `order_items(orders.first["id"])`,
	},
	"tickets": {
		Description: "The customer's most recent support tickets, newest first, with their notes (author, body, created_at).",
		Params: []glovebox.Param{{
			Name:        "filters",
			Description: fmt.Sprintf("Optional keyword arguments: status: (%s) and limit: (1 to %d, default 10).", strings.Join(TicketStatuses, ", "), MaxTicketLimit),
			Schema:      keywords(`"status":` + enum(TicketStatuses) + fmt.Sprintf(`,"limit":{"type":"integer","minimum":1,"maximum":%d}`, MaxTicketLimit)),
		}},
		Example: `tickets(status: "open")`,
	},
	"change_plan": {
		Description: "Moves the customer to another plan: free, starter or pro. The enterprise plan is arranged by the sales team (open a ticket); an unknown plan or the current one raises Glovebox::ToolError.",
		Params:      []glovebox.Param{{Name: "plan", Description: "The plan name, lower case.", Schema: json.RawMessage(enum(Plans[:3]))}},
		Returns:     "the new plan, the previous one and when it changed",
		Example:     `change_plan("pro")`,
	},
	"create_ticket": {
		Description: fmt.Sprintf("Opens a support ticket for the customer. At most %d unresolved tickets per customer.", MaxOpenTickets),
		Params: []glovebox.Param{
			{Name: "subject", Description: fmt.Sprintf("One line, 3 to %d characters.", MaxSubject)},
			{Name: "body", Description: fmt.Sprintf("%d to %d characters.", MinBody, MaxBody)},
			{
				Name:        "options",
				Description: "Optional keyword argument priority: (" + strings.Join(TicketPriorities, ", ") + "; default normal).",
				Schema:      keywords(`"priority":` + enum(TicketPriorities)),
			},
		},
		Returns: "the new ticket",
		Example: `create_ticket("Order #1234 arrived damaged", "The lamp's base is cracked.", priority: "high")`,
	},
	"update_ticket": {
		Description: "Changes one of the customer's tickets; another customer's ticket, or a missing one, raises Glovebox::ToolError.",
		Params: []glovebox.Param{
			{Name: "ticket_id", Description: "A ticket id from tickets."},
			{
				Name: "changes",
				Description: fmt.Sprintf("Keyword arguments, at least one: status: (%s), priority: (%s), note: (1 to %d characters, added as the assistant's note).",
					strings.Join(TicketStatuses, ", "), strings.Join(TicketPriorities, ", "), MaxNote),
				Schema: keywords(`"status":` + enum(TicketStatuses) + `,"priority":` + enum(TicketPriorities) + `,"note":{"type":"string"}`),
			},
		},
		Returns: "the updated ticket",
		Example: `update_ticket(42, status: "closed", note: "Customer confirmed the replacement arrived.")`,
	},
}

// Limits on what the write tools accept, in characters (Unicode code
// points), and the most unresolved tickets one customer may have. They
// are this example's own choices, sized like a typical help-desk form.
const (
	MaxSubject     = 80
	MinBody        = 10
	MaxBody        = 5000
	MaxNote        = 2000
	MaxOpenTickets = 10
	MaxTicketLimit = 50
)

// The values a ticket's status and priority, and an order's status, may have.
var (
	TicketStatuses   = []string{"open", "pending", "closed"}
	TicketPriorities = []string{"low", "normal", "high", "urgent"}
	OrderStatuses    = []string{"pending", "paid", "shipped", "delivered", "cancelled", "refunded"}
)

// InputError is a refusal meant for the model: its message says what was
// wrong and what would be accepted.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func refuse(format string, args ...any) error { return &InputError{fmt.Sprintf(format, args...)} }

// ErrNoCustomer is returned by every tool called without a customer in
// its context: the host forgot [WithCustomer]. It fails closed.
var ErrNoCustomer = errors.New("desk: no customer in scope")

// InternalErrorMessage is what the guest sees for a host failure.
const InternalErrorMessage = "the support desk could not complete the request (internal error); try again later"

// SanitizeError is a [glovebox.Hooks] SanitizeError: an [*InputError]
// passes through, anything else is logged and replaced by
// [InternalErrorMessage], so database errors and paths never reach the
// model.
func SanitizeError(tool string, err error) string {
	if ie, ok := errors.AsType[*InputError](err); ok {
		return ie.Msg
	}
	slog.Error("supportdesk: tool failed", "tool", tool, "err", err)
	return InternalErrorMessage
}

type customerKey struct{}

// WithCustomer returns a context in which the tools act for customer id.
// The host sets it from its own authentication; guest code has no way to
// change it.
func WithCustomer(ctx context.Context, id int64) context.Context {
	return context.WithValue(ctx, customerKey{}, id)
}

func customerOf(ctx context.Context) (int64, error) {
	id, ok := ctx.Value(customerKey{}).(int64)
	if !ok {
		return 0, ErrNoCustomer
	}
	return id, nil
}

func (t *Tools) now() time.Time {
	if t.Clock != nil {
		return t.Clock().UTC()
	}
	n := time.Now().UTC()
	return t.db.Today.Add(n.Sub(n.Truncate(24 * time.Hour))).Truncate(time.Second)
}

// Profile is the customer's own account.
type Profile struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	Email      string `json:"email"`
	Phone      string `json:"phone"`
	Plan       string `json:"plan"`
	SignupDate string `json:"signup_date"`
}

// Profile returns the customer's account.
func (t *Tools) Profile(ctx context.Context) (Profile, error) {
	id, err := customerOf(ctx)
	if err != nil {
		return Profile{}, err
	}
	var p Profile
	err = t.db.QueryRowContext(ctx, `SELECT id, name, email, phone, plan, signup_date FROM customers WHERE id = ?`, id).
		Scan(&p.ID, &p.Name, &p.Email, &p.Phone, &p.Plan, &p.SignupDate)
	return p, err
}

// Order is one of the customer's orders; Total is in dollars.
type Order struct {
	ID        int64   `json:"id"`
	Status    string  `json:"status"`
	OrderedAt string  `json:"ordered_at"`
	Total     float64 `json:"total"`
	ItemCount int     `json:"item_count"`
}

// Orders returns the customer's orders, newest first, narrowed by
// optional keyword filters: status (one status or an Array of them),
// year (an Integer), from and to (dates "YYYY-MM-DD", inclusive). An
// unknown filter or value is refused.
func (t *Tools) Orders(ctx context.Context, filters map[string]any) ([]Order, error) {
	id, err := customerOf(ctx)
	if err != nil {
		return nil, err
	}
	q := `SELECT o.id, o.status, o.ordered_at, o.total_cents,
		(SELECT COALESCE(SUM(quantity), 0) FROM order_items WHERE order_id = o.id)
		FROM orders o WHERE o.customer_id = ?`
	args := []any{id}
	for key, v := range options(filters) {
		switch key {
		case "status":
			statuses, err := stringList(v, "status", OrderStatuses)
			if err != nil {
				return nil, err
			}
			q += ` AND o.status IN (?` + strings.Repeat(`, ?`, len(statuses)-1) + `)`
			for _, s := range statuses {
				args = append(args, s)
			}
		case "year":
			y, ok := v.(int64)
			if !ok || y < 1970 || y > 9999 {
				return nil, refuse("year must be an Integer such as %d, not %s", t.db.Today.Year(), describe(v))
			}
			q += ` AND o.ordered_at LIKE ?`
			args = append(args, fmt.Sprintf("%04d-%%", y))
		case "from", "to":
			d, ok := v.(string)
			if _, err := time.Parse(DateLayout, d); !ok || err != nil {
				return nil, refuse("%s must be a date String \"YYYY-MM-DD\", not %s", key, describe(v))
			}
			q += map[string]string{"from": ` AND o.ordered_at >= ?`, "to": ` AND o.ordered_at <= ?`}[key]
			args = append(args, d)
		default:
			return nil, refuse("orders has no filter %q (filters: status, year, from, to)", key)
		}
	}
	return collect(ctx, t.db, q+` ORDER BY o.ordered_at DESC, o.id DESC`, args, func(o *Order) []any {
		return []any{&o.ID, &o.Status, &o.OrderedAt, inDollars{&o.Total}, &o.ItemCount}
	})
}

// Item is one line of an order; prices are in dollars.
type Item struct {
	SKU       string  `json:"sku"`
	Name      string  `json:"name"`
	Quantity  int     `json:"quantity"`
	UnitPrice float64 `json:"unit_price"`
	LineTotal float64 `json:"line_total"`
}

// OrderItems returns the lines of one of the customer's orders. An order
// of another customer is refused exactly like one that does not exist.
func (t *Tools) OrderItems(ctx context.Context, orderID int64) ([]Item, error) {
	id, err := customerOf(ctx)
	if err != nil {
		return nil, err
	}
	items, err := collect(ctx, t.db, `SELECT p.sku, p.name, i.quantity, i.unit_price_cents, i.quantity * i.unit_price_cents
		FROM order_items i JOIN orders o ON o.id = i.order_id JOIN products p ON p.id = i.product_id
		WHERE i.order_id = ? AND o.customer_id = ? ORDER BY i.id`, []any{orderID, id}, func(it *Item) []any {
		return []any{&it.SKU, &it.Name, &it.Quantity, inDollars{&it.UnitPrice}, inDollars{&it.LineTotal}}
	})
	if err != nil {
		return nil, err
	}
	if len(items) == 0 { // every order has at least one line
		return nil, refuse("no order #%d on this account", orderID)
	}
	return items, nil
}

// Ticket is a support ticket with its notes, oldest note first.
type Ticket struct {
	ID        int64  `json:"id"`
	Subject   string `json:"subject"`
	Body      string `json:"body"`
	Status    string `json:"status"`
	Priority  string `json:"priority"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
	Notes     []Note `json:"notes"`
}

// Note is a remark on a ticket by "agent" (support staff), "assistant"
// (the model, through update_ticket) or "customer".
type Note struct {
	Author    string `json:"author"`
	Body      string `json:"body"`
	CreatedAt string `json:"created_at"`
}

// Tickets returns the customer's most recent tickets, newest first:
// limit of them (keyword, 1 to MaxTicketLimit, default 10), narrowed to
// one status (keyword status) if given.
func (t *Tools) Tickets(ctx context.Context, filters map[string]any) ([]Ticket, error) {
	id, err := customerOf(ctx)
	if err != nil {
		return nil, err
	}
	q := `SELECT id FROM tickets WHERE customer_id = ?`
	args := []any{id}
	limit := int64(10)
	for key, v := range options(filters) {
		switch key {
		case "status":
			s, err := oneOf(v, "status", TicketStatuses)
			if err != nil {
				return nil, err
			}
			q += ` AND status = ?`
			args = append(args, s)
		case "limit":
			n, ok := v.(int64)
			if !ok || n < 1 || n > MaxTicketLimit {
				return nil, refuse("limit must be an Integer from 1 to %d, not %s", MaxTicketLimit, describe(v))
			}
			limit = n
		default:
			return nil, refuse("tickets has no filter %q (filters: status, limit)", key)
		}
	}
	ids, err := collect(ctx, t.db, q+` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, limit),
		func(id *int64) []any { return []any{id} })
	if err != nil {
		return nil, err
	}
	tickets := []Ticket{}
	for _, tid := range ids {
		tk, err := readTicket(ctx, t.db, id, tid)
		if err != nil {
			return nil, err
		}
		tickets = append(tickets, tk)
	}
	return tickets, nil
}

// PlanChange reports a change of plan.
type PlanChange struct {
	Plan         string `json:"plan"`
	PreviousPlan string `json:"previous_plan"`
	ChangedAt    string `json:"changed_at"`
}

// ChangePlan moves the customer to plan, one of free, starter or pro.
// Enterprise is refused (sales arranges it, through a ticket), as are
// unknown names and the plan the customer already has.
func (t *Tools) ChangePlan(ctx context.Context, plan string) (PlanChange, error) {
	id, err := customerOf(ctx)
	if err != nil {
		return PlanChange{}, err
	}
	if !slices.Contains(Plans, plan) {
		return PlanChange{}, refuse("there is no plan %q (plans: %s)", plan, strings.Join(Plans, ", "))
	}
	if plan == "enterprise" {
		return PlanChange{}, refuse("the enterprise plan is arranged by the sales team and cannot be chosen here; open a ticket asking for it")
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return PlanChange{}, err
	}
	defer tx.Rollback()
	pc := PlanChange{Plan: plan, ChangedAt: t.now().Format(InstantLayout)}
	if err := tx.QueryRowContext(ctx, `SELECT plan FROM customers WHERE id = ?`, id).Scan(&pc.PreviousPlan); err != nil {
		return PlanChange{}, err
	}
	if pc.PreviousPlan == plan {
		return PlanChange{}, refuse("the account is already on the %s plan", plan)
	}
	if pc.PreviousPlan == "enterprise" {
		return PlanChange{}, refuse("enterprise contracts are changed by the sales team; open a ticket asking for it")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE customers SET plan = ? WHERE id = ?`, plan, id); err != nil {
		return PlanChange{}, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO plan_changes (customer_id, from_plan, to_plan, changed_at) VALUES (?, ?, ?, ?)`,
		id, pc.PreviousPlan, plan, pc.ChangedAt); err != nil {
		return PlanChange{}, err
	}
	return pc, tx.Commit()
}

// CreateTicket opens a ticket. The subject is one line of 3 to
// MaxSubject characters, the body MinBody to MaxBody characters (both
// trimmed); the keyword priority is one of TicketPriorities (default
// "normal"). A customer with MaxOpenTickets unresolved tickets is
// refused.
func (t *Tools) CreateTicket(ctx context.Context, subject, body string, opts map[string]any) (Ticket, error) {
	id, err := customerOf(ctx)
	if err != nil {
		return Ticket{}, err
	}
	subject, body = strings.TrimSpace(subject), strings.TrimSpace(body)
	if err := textLength("subject", subject, 3, MaxSubject); err != nil {
		return Ticket{}, err
	}
	if strings.ContainsAny(subject, "\r\n") {
		return Ticket{}, refuse("subject must be a single line")
	}
	if err := textLength("body", body, MinBody, MaxBody); err != nil {
		return Ticket{}, err
	}
	priority := "normal"
	for key, v := range options(opts) {
		if key != "priority" {
			return Ticket{}, refuse("create_ticket has no option %q (options: priority)", key)
		}
		if priority, err = oneOf(v, "priority", TicketPriorities); err != nil {
			return Ticket{}, err
		}
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return Ticket{}, err
	}
	defer tx.Rollback()
	var open int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tickets WHERE customer_id = ? AND status != 'closed'`, id).Scan(&open); err != nil {
		return Ticket{}, err
	}
	if open >= MaxOpenTickets {
		return Ticket{}, refuse("the account already has %d unresolved tickets; add a note to one of them instead", open)
	}
	now := t.now().Format(InstantLayout)
	res, err := tx.ExecContext(ctx, `INSERT INTO tickets (customer_id, subject, body, status, priority, created_at, updated_at)
		VALUES (?, ?, ?, 'open', ?, ?, ?)`, id, subject, body, priority, now, now)
	if err != nil {
		return Ticket{}, err
	}
	tid, err := res.LastInsertId()
	if err != nil {
		return Ticket{}, err
	}
	tk, err := readTicket(ctx, tx, id, tid)
	if err != nil {
		return Ticket{}, err
	}
	return tk, tx.Commit()
}

// UpdateTicket changes one of the customer's tickets. Keywords: status
// (one of TicketStatuses), priority (one of TicketPriorities), note (1 to
// MaxNote characters, added as the assistant's). At least one is needed.
// Another customer's ticket is refused exactly like one that does not
// exist.
func (t *Tools) UpdateTicket(ctx context.Context, ticketID int64, changes map[string]any) (Ticket, error) {
	id, err := customerOf(ctx)
	if err != nil {
		return Ticket{}, err
	}
	if len(changes) == 0 {
		return Ticket{}, refuse("nothing to change: pass status:, priority: or note:")
	}
	var status, priority, note string
	for key, v := range options(changes) {
		switch key {
		case "status":
			status, err = oneOf(v, "status", TicketStatuses)
		case "priority":
			priority, err = oneOf(v, "priority", TicketPriorities)
		case "note":
			s, ok := v.(string)
			if !ok {
				return Ticket{}, refuse("note must be a String, not %s", describe(v))
			}
			note = strings.TrimSpace(s)
			err = textLength("note", note, 1, MaxNote)
		default:
			err = refuse("update_ticket has no field %q (fields: status, priority, note)", key)
		}
		if err != nil {
			return Ticket{}, err
		}
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return Ticket{}, err
	}
	defer tx.Rollback()
	var owner int64
	err = tx.QueryRowContext(ctx, `SELECT customer_id FROM tickets WHERE id = ?`, ticketID).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && owner != id) {
		return Ticket{}, refuse("no ticket #%d on this account", ticketID)
	} else if err != nil {
		return Ticket{}, err
	}
	now := t.now().Format(InstantLayout)
	if _, err := tx.ExecContext(ctx, `UPDATE tickets SET status = COALESCE(NULLIF(?, ''), status),
		priority = COALESCE(NULLIF(?, ''), priority), updated_at = ? WHERE id = ?`, status, priority, now, ticketID); err != nil {
		return Ticket{}, err
	}
	if note != "" {
		if _, err := tx.ExecContext(ctx, `INSERT INTO ticket_notes (ticket_id, author, body, created_at) VALUES (?, 'assistant', ?, ?)`,
			ticketID, note, now); err != nil {
			return Ticket{}, err
		}
	}
	tk, err := readTicket(ctx, tx, id, ticketID)
	if err != nil {
		return Ticket{}, err
	}
	return tk, tx.Commit()
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readTicket reads ticket tid of customer id with its notes.
func readTicket(ctx context.Context, q querier, id, tid int64) (Ticket, error) {
	tk := Ticket{Notes: []Note{}}
	err := q.QueryRowContext(ctx, `SELECT id, subject, body, status, priority, created_at, updated_at
		FROM tickets WHERE id = ? AND customer_id = ?`, tid, id).
		Scan(&tk.ID, &tk.Subject, &tk.Body, &tk.Status, &tk.Priority, &tk.CreatedAt, &tk.UpdatedAt)
	if err != nil {
		return Ticket{}, err
	}
	tk.Notes, err = collect(ctx, q, `SELECT author, body, created_at FROM ticket_notes WHERE ticket_id = ? ORDER BY id`,
		[]any{tid}, func(n *Note) []any { return []any{&n.Author, &n.Body, &n.CreatedAt} })
	return tk, err
}

// collect runs a query and returns its rows, each scanned into the
// destinations fields gives for a new element; never nil, so an empty
// result crosses as [] rather than nil.
func collect[T any](ctx context.Context, q querier, query string, args []any, fields func(*T) []any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var x T
		if err := rows.Scan(fields(&x)...); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// inDollars scans integer cents into a dollar amount.
type inDollars struct{ f *float64 }

func (d inDollars) Scan(src any) error {
	cents, ok := src.(int64)
	if !ok {
		return fmt.Errorf("desk: want integer cents, got %T", src)
	}
	*d.f = float64(cents) / 100
	return nil
}

// options yields the keyword arguments of an options parameter in name
// order, so the first bad one reported is always the same. Toolset.Func
// passes keywords as one last argument (an empty map when there are
// none); a guest may also pass a Hash positionally.
func options(m map[string]any) iter.Seq2[string, any] {
	return func(yield func(string, any) bool) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

func oneOf(v any, name string, allowed []string) (string, error) {
	s, ok := v.(string)
	if !ok || !slices.Contains(allowed, s) {
		return "", refuse("%s must be one of %s, not %s", name, strings.Join(allowed, ", "), describe(v))
	}
	return s, nil
}

func stringList(v any, name string, allowed []string) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	if len(list) == 0 {
		return nil, refuse("%s must name at least one of %s", name, strings.Join(allowed, ", "))
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, err := oneOf(x, name, allowed)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func textLength(name, s string, lo, hi int) error {
	if n := utf8.RuneCountInString(s); n < lo || n > hi {
		return refuse("%s must be %d to %d characters, not %d", name, lo, hi, n)
	}
	return nil
}

// describe names a guest value for an error message: its Ruby class and,
// for short strings and numbers, the value.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		if utf8.RuneCountInString(x) <= 40 {
			return fmt.Sprintf("%q", x)
		}
		return "a long String"
	case int64, float64:
		return fmt.Sprint(x)
	case bool:
		return fmt.Sprint(x)
	case []any:
		return "an Array"
	case map[string]any:
		return "a Hash"
	}
	return fmt.Sprintf("a %T", v)
}
