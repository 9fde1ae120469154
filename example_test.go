package glovebox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/gloveboxhq/glovebox"
)

func ExampleRuntime_Eval() {
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	res, err := rt.Eval(ctx, `puts "adding"; [1, 2, 3].sum`)
	if err != nil {
		log.Fatal(err) // a host-side failure; the guest's own failures are statuses
	}
	fmt.Println(res.Status, res.Value)
	fmt.Print(res.Stdout)

	res, _ = rt.Eval(ctx, `raise ArgumentError, "bad input"`)
	fmt.Println(res.Status, res.Error.Class, res.Error.Message)
	// Output:
	// ok 6
	// adding
	// error ArgumentError bad input
}

func ExampleRuntime_WithLimits() {
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	// A view overrides only what it sets; closing it leaves rt open.
	strict, err := rt.WithLimits(glovebox.Limits{Fuel: 50_000_000})
	if err != nil {
		log.Fatal(err)
	}
	defer strict.Close()
	res, _ := strict.Eval(ctx, `loop { }`)
	fmt.Println(res.Status)

	quick, err := rt.WithLimits(glovebox.Limits{Timeout: 200 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	res, _ = quick.Eval(ctx, `sleep 10`)
	fmt.Println(res.Status, errors.Is(res.Err(), context.DeadlineExceeded))
	quick.Close()

	res, _ = rt.Eval(ctx, `1 + 1`)
	fmt.Println(res.Status, res.Value)
	// Output:
	// fuel_exhausted
	// timeout true
	// ok 2
}

// Order is example host data.
type Order struct {
	ID     int     `json:"id"`
	Status string  `json:"status"`
	Total  float64 `json:"total"`
}

// OrderTools exposes a customer's orders to the guest.
type OrderTools struct{ orders []Order }

func (t *OrderTools) Orders() []Order { return t.orders }

func (t *OrderTools) Cancel(id int) error { return errors.New("orders cannot be cancelled here") }

// A tool set over data, and guest code that filters and sums it in one
// eval: the shape of "code mode" for an agent.
func ExampleToolset_Object() {
	tools := &OrderTools{orders: []Order{{1, "shipped", 120.50}, {2, "pending", 35}, {3, "shipped", 99.99}}}
	var ts glovebox.Toolset
	if err := ts.Object(tools, glovebox.Only("orders")); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	fmt.Println(rt.Tools())

	res, _ := rt.Eval(ctx, `orders.select { |o| o["status"] == "shipped" }.sum { |o| o["total"] }`)
	fmt.Println(res.Status, res.Value, len(res.ToolCalls))
	// Output:
	// [orders]
	// ok 220.49 1
}

func ExampleToolset_Func() {
	var ts glovebox.Toolset
	ts.Func("lookup", func(ctx context.Context, sku string, opts map[string]any) (map[string]any, error) {
		if sku != "A1" {
			return nil, fmt.Errorf("unknown sku %q", sku)
		}
		return map[string]any{"sku": sku, "stock": 7, "verbose": opts["verbose"]}, nil
	})
	ctx := context.Background()
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	res, _ := rt.Eval(ctx, `
		item = lookup("A1", verbose: true)
		missing = begin
		  lookup("ZZ", verbose: false)
		rescue Glovebox::ToolError => e
		  e.message
		end
		[item["stock"], item["verbose"], missing]`)
	fmt.Println(res.Value)
	// Output:
	// [7 true unknown sku "ZZ"]
}
