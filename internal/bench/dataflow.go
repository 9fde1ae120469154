package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
)

// dataflowProgram is the support-desk program of the code-mode row with
// the customer's email and their open tickets in its answer: the values
// the labels mark cross the boundary and come back in the result.
const dataflowProgram = `me = profile
recent = orders(year: 2026).reject { |o| %w[cancelled refunded].include?(o["status"]) }
items = recent.empty? ? [] : order_items(recent.first["id"])
open = tickets(status: "open")
{ "name" => me["name"], "email" => me["email"], "plan" => me["plan"], "orders" => recent.size,
  "spent" => recent.sum { |o| o["total"] }.round(2),
  "last_order" => items.map { |i| "#{i["quantity"]} × #{i["name"]}" },
  "open_tickets" => open.map { |t| t["subject"] } }`

// dataflowCalls is the number of tool calls in dataflowProgram, and
// dataflowLoop the number of profile calls in the per-call program.
const (
	dataflowCalls = 4
	dataflowLoop  = 200
)

// benchDataflow adds the rows of the data-flow policy: the support-desk
// program through code mode on a Runtime whose tools are labelled
// (desk.Register) beside one whose tools are not
// (desk.RegisterUnlabelled), the two run alternately in the same run;
// and a loop of labelled tool calls beside the same loop unlabelled, for
// the cost per call.
func benchDataflow(ctx context.Context, row func(met string, cols ...string), yes func(bool) string) error {
	db, done, err := benchDesk(ctx)
	if err != nil {
		return err
	}
	defer done()
	dt := desk.NewTools(db)
	var rts [2]*glovebox.Runtime // unlabelled, labelled
	var tools [2]*codemode.Tool
	for i, register := range []func(*glovebox.Toolset) error{dt.RegisterUnlabelled, dt.Register} {
		var ts glovebox.Toolset
		if err := register(&ts); err != nil {
			return err
		}
		rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, Hooks: glovebox.Hooks{SanitizeError: desk.SanitizeError},
			Limits: glovebox.Limits{ToolCalls: 2 * dataflowLoop}})
		if err != nil {
			return err
		}
		defer rt.Close()
		rts[i] = rt
		if tools[i], err = codemode.New(codemode.Config{Runtime: rt}); err != nil {
			return err
		}
	}
	cctx := desk.WithCustomer(ctx, desk.DemoCustomer)
	input, _ := json.Marshal(map[string]string{"code": dataflowProgram})
	var prog [2][]time.Duration
	for i := range codeModeRounds + 10 {
		for k, tool := range tools {
			start := time.Now()
			out, err := tool.Handle(cctx, input)
			if err != nil {
				return err
			}
			d := time.Since(start)
			if out.IsError || len(out.Result.ToolCalls) != dataflowCalls {
				return fmt.Errorf("data-flow program: %s", out.Output)
			}
			if labelled := strings.Contains(string(out.Output), "[[email:"); labelled != (k == 1) {
				return fmt.Errorf("data-flow program (labelled %v): %s", k == 1, out.Output)
			}
			if i >= 10 {
				prog[k] = append(prog[k], d)
			}
		}
	}
	plain, labelled := summarize(prog[0]), summarize(prog[1])
	extra := labelled.p50 - plain.p50
	row("-", fmt.Sprintf("support-desk program with labels (email, phone, emails in tickets), %d tool calls, code mode (p50 / p99 of %d)", dataflowCalls, codeModeRounds),
		ms(labelled.p50)+" / "+ms(labelled.p99), "without labels "+ms(plain.p50)+" / "+ms(plain.p99),
		fmt.Sprintf("+%s per eval, +%s per tool call", us(extra), us(extra/dataflowCalls)), "-")

	// Per call: a loop of profile calls, each labelled, in one eval.
	loop := fmt.Sprintf(`n = 0; %d.times { n += profile["email"].size }; n`, dataflowLoop)
	cp, cl, err := perCall(cctx, rts, loop)
	if err != nil {
		return err
	}
	row("-", fmt.Sprintf("labelled tool call (profile: email and phone recorded, transcript tokenized), per call in a loop of %d", dataflowLoop),
		us(cl.p50), "unlabelled "+us(cp.p50), fmt.Sprintf("+%s per call", us(cl.p50-cp.p50)), "-")

	// Per sink call: the check of a ticket-sized argument against the
	// values recorded (the customer's email and phone, the emails in
	// their tickets), in every spelling; create_ticket refuses the short
	// subject after the check, so nothing is written.
	sink := fmt.Sprintf(`profile; tickets; body = %q * 20; n = 0
%d.times { begin; create_ticket("x", body); rescue Glovebox::ToolError; n += 1; end }; n`,
		"My order arrived with a cracked base; can you send a replacement? ", dataflowLoop)
	sp, sl, err := perCall(cctx, rts, sink)
	if err != nil {
		return err
	}
	row("-", fmt.Sprintf("sink check of a %d-byte argument (create_ticket, every spelling of the recorded values), per call in a loop of %d", 20*66, dataflowLoop),
		us(sl.p50), "unlabelled "+us(sp.p50), fmt.Sprintf("+%s per call", us(sl.p50-sp.p50)), "-")
	return nil
}

// perCall runs code, a loop of dataflowLoop tool calls whose value is
// dataflowLoop or more, on each Runtime in turn, 30 times after 5 to warm
// up, and summarizes the time per call on each.
func perCall(ctx context.Context, rts [2]*glovebox.Runtime, code string) (unlabelled, labelled stat, err error) {
	var calls [2][]time.Duration
	for i := range 30 + 5 {
		for k, rt := range rts {
			start := time.Now()
			res, err := rt.Eval(ctx, code)
			if err != nil {
				return stat{}, stat{}, err
			}
			d := time.Since(start)
			if n, _ := res.Value.(int64); res.Status != glovebox.StatusOK || n < dataflowLoop {
				return stat{}, stat{}, fmt.Errorf("data-flow loop: %s: %v %+v", res.Status, res.Value, res.Error)
			}
			if i >= 5 {
				calls[k] = append(calls[k], d/dataflowLoop)
			}
		}
	}
	return summarize(calls[0]), summarize(calls[1]), nil
}

// benchDesk generates the support desk's database from the default seed
// in a temporary directory and opens it; done closes and removes it.
func benchDesk(ctx context.Context) (db *desk.DB, done func(), err error) {
	dir, err := os.MkdirTemp("", "glovebox-bench-")
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "desk.db")
	if _, err = desk.Generate(ctx, path, desk.Options{}); err == nil {
		db, err = desk.Open(ctx, path)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }, nil
}
