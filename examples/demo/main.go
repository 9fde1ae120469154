// Command demo runs Ruby programs through glovebox the way an agent's
// "code mode" would: each program is untrusted code that can reach only
// the tools this host exposes (a small order book here), and each result
// comes back as structured data.
//
//	go run ./examples/demo examples/*.rb
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Order is host data the guest may read through the orders tool.
type Order struct {
	ID     int     `json:"id"`
	Status string  `json:"status"`
	Total  float64 `json:"total"`
}

// Shop is the tool object: its exported methods become guest functions,
// narrowed to what ToolMethods allows.
type Shop struct {
	orders []Order
	notes  []string
}

// Orders returns every order.
func (s *Shop) Orders() []Order { return s.orders }

// Order returns one order by id.
func (s *Shop) Order(id int) (Order, error) {
	for _, o := range s.orders {
		if o.ID == id {
			return o, nil
		}
	}
	return Order{}, fmt.Errorf("no order %d", id)
}

// AddNote records a finding.
func (s *Shop) AddNote(note string) int {
	s.notes = append(s.notes, note)
	return len(s.notes)
}

// Reset is for the host only; the ceiling below keeps it from the guest.
func (s *Shop) Reset() { s.notes = nil }

// ToolMethods is the most this object will ever expose.
func (s *Shop) ToolMethods() []string { return []string{"Orders", "Order", "AddNote"} }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demo FILE.rb...")
		os.Exit(2)
	}
	shop := &Shop{orders: []Order{
		{1, "shipped", 120.50}, {2, "pending", 35.00}, {3, "shipped", 99.99}, {4, "cancelled", 10.00}, {5, "shipped", 29.00},
	}}
	var tools glovebox.Toolset
	if err := tools.Object(shop); err != nil {
		fail(err)
	}
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{
		Tools:  &tools,
		Limits: glovebox.Limits{Timeout: 2 * time.Second},
		Progress: func(step string) func() {
			fmt.Fprintf(os.Stderr, "glovebox: %s...\n", step)
			start := time.Now()
			return func() { fmt.Fprintf(os.Stderr, "glovebox: done in %.1fs\n", time.Since(start).Seconds()) }
		},
	})
	if err != nil {
		fail(err)
	}
	defer rt.Close()
	fmt.Printf("tools the guest sees: %v\n\n", rt.Tools())
	for _, path := range os.Args[1:] {
		code, err := os.ReadFile(path)
		if err != nil {
			fail(err)
		}
		res, err := rt.Eval(ctx, string(code))
		if err != nil {
			fail(err)
		}
		fmt.Printf("== %s: %s in %.2f ms, %d tool calls\n", filepath.Base(path), res.Status,
			float64(res.Duration.Microseconds())/1000, len(res.ToolCalls))
		if res.Stdout != "" {
			fmt.Print(res.Stdout)
		}
		if res.Status == glovebox.StatusOK {
			b, _ := json.Marshal(res)
			var v struct {
				Value json.RawMessage `json:"value"`
			}
			json.Unmarshal(b, &v)
			fmt.Printf("=> %s\n\n", v.Value)
		} else {
			fmt.Printf("!! %s: %s\n\n", res.Error.Class, res.Error.Message)
		}
	}
	fmt.Printf("notes recorded on the host: %q\n", shop.notes)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	if errors.Is(err, glovebox.ErrNoNPM) {
		os.Exit(3)
	}
	os.Exit(1)
}
