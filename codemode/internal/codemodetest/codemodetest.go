// Package codemodetest holds what the codemode packages' tests share: a
// test process's glovebox Runtime and a small shop whose tools the tests
// expose.
package codemodetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

// Main creates the test process's one engine, runs the tests and exits.
// Runtimes the tests make later share the engine.
func Main(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	rt, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1, Progress: func(step string) func() {
		fmt.Fprintf(os.Stderr, "glovebox: %s...\n", step)
		return func() {}
	}})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	rt.Close()
	os.Exit(code)
}

// Runtime makes a Runtime exposing ts (nil for none) with limits l,
// closed when t ends.
func Runtime(t testing.TB, ts *glovebox.Toolset, l glovebox.Limits) *glovebox.Runtime {
	t.Helper()
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, Limits: l, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// Order is one order of the test shop.
type Order struct {
	ID     int64   `json:"id"`
	Status string  `json:"status"`
	Total  float64 `json:"total"`
}

// OrderQuery filters Orders.
type OrderQuery struct {
	Status string `json:"status,omitempty" jsonschema_description:"shipped, pending or cancelled; empty for all"`
}

// Shop is the test customer's account: five orders and a plan.
type Shop struct {
	Plan string
}

// Orders returns the customer's orders, filtered by q.
func (s *Shop) Orders(q OrderQuery) ([]Order, error) {
	all := []Order{
		{1, "shipped", 120.50}, {2, "pending", 35}, {3, "shipped", 79.99}, {4, "cancelled", 12}, {5, "shipped", 200},
	}
	if q.Status != "" && !slices.Contains([]string{"shipped", "pending", "cancelled"}, q.Status) {
		return nil, fmt.Errorf("status %q is not one of shipped, pending, cancelled", q.Status)
	}
	var out []Order
	for _, o := range all {
		if q.Status == "" || o.Status == q.Status {
			out = append(out, o)
		}
	}
	return out, nil
}

// ChangePlan moves the customer to plan.
func (s *Shop) ChangePlan(plan string) (map[string]any, error) {
	if !slices.Contains([]string{"basic", "premium"}, plan) {
		return nil, errors.New("plan must be basic or premium")
	}
	s.Plan = plan
	return map[string]any{"plan": plan}, nil
}

// ShippedTotal is the sum of the shop's shipped orders, the answer the
// tests' scripted models compute in the sandbox.
const ShippedTotal = 120.50 + 79.99 + 200

// Toolset exposes s's Orders and ChangePlan, documented.
func Toolset(s *Shop) (*glovebox.Toolset, error) {
	var ts glovebox.Toolset
	if err := ts.Object(s, glovebox.Only("Orders", "ChangePlan")); err != nil {
		return nil, err
	}
	if err := ts.Describe("orders", glovebox.ToolDoc{
		Description: "Lists the customer's orders, oldest first.",
		Returns:     "an Array of order Hashes",
	}); err != nil {
		return nil, err
	}
	if err := ts.Describe("change_plan", glovebox.ToolDoc{
		Description: "Moves the customer to another plan.",
		Params:      []glovebox.Param{{Name: "plan", Description: "basic or premium"}},
		Returns:     "the new plan",
		Example:     `change_plan("premium")`,
	}); err != nil {
		return nil, err
	}
	return &ts, nil
}

// Question is what the adapters' scripted models are asked.
const Question = "What is my total on shipped orders?"

// ShopTool returns the codemode tool over a fresh Shop's tools, with a
// fuel budget small enough that a runaway loop ends quickly.
func ShopTool(t testing.TB) *codemode.Tool {
	t.Helper()
	ts, err := Toolset(&Shop{Plan: "basic"})
	if err != nil {
		t.Fatal(err)
	}
	tool, err := codemode.New(codemode.Config{Runtime: Runtime(t, ts, glovebox.Limits{Fuel: 200_000_000})})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}
