package bench

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// MCP rows (issue 25): a run_ruby round trip over Streamable HTTP at
// each revision beside the in-process eval it wraps, and an approval
// round trip at 2026-07-28 (the input_required question out, the
// client's answer in, the tool run and the result) beside the same call
// without approval.

// mcpRoundTripTarget is how much a run_ruby round trip over loopback HTTP
// may add to the in-process eval at p50: a few JSON encodings, an HTTP
// exchange and (at 2026-07-28) a session made per request, small beside
// a model's turn.
const mcpRoundTripTarget = 5 * time.Millisecond

// thinkTime stands for the person reading the approval question (and the
// next one): untimed, and long enough for the pool to prepare the VM the
// answer's replay takes (the pool refills when quiet; 1 ms is not enough
// on a loaded 2-core machine, 10 ms is, and a person takes seconds).
const thinkTime = 10 * time.Millisecond

func benchMCP(ctx context.Context, samples int, row Row) error {
	secret := make([]byte, 32)
	crand.Read(secret)
	keys, err := glovebox.NewKeyring(glovebox.StateKey{ID: "bench", Secret: secret})
	if err != nil {
		return err
	}
	var ts glovebox.Toolset
	if err := ts.Func("lookup", func(n int) int { return n }); err != nil {
		return err
	}
	if err := ts.Func("change", func(n int) int { return n }); err != nil {
		return err
	}
	if err := ts.RequireApproval("change"); err != nil {
		return err
	}
	if err := mcpserver.ClientTools(&ts); err != nil {
		return err
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, StateKeys: keys, PoolSize: 2, Progress: progress,
		Hooks: glovebox.Hooks{Approver: mcpserver.Approve}})
	if err != nil {
		return err
	}
	defer rt.Close()
	srv, err := mcpserver.New(mcpserver.Options{Runtime: rt, StateKey: secret})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h, err := srv.HTTPHandler(mcpserver.HTTPOptions{Addr: ln.Addr().String()})
	if err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	defer hs.Close()
	url := "http://" + ln.Addr().String() + "/mcp"

	measure := func(do func() error) (stat, error) {
		var d []time.Duration
		for range samples {
			start := time.Now()
			if err := do(); err != nil {
				return stat{}, err
			}
			d = append(d, time.Since(start))
			// The pool refills when quiet, as between a person's
			// questions and answers; back to back, every row would time
			// VMs being made.
			time.Sleep(time.Millisecond)
		}
		return summarize(d), nil
	}
	inproc, err := measure(func() error {
		res, err := rt.Eval(ctx, "lookup(1) + 1")
		if err == nil && res.Status != glovebox.StatusOK {
			err = fmt.Errorf("bench: in-process eval: %s", res.Status)
		}
		return err
	})
	if err != nil {
		return err
	}
	connect := func(version string) (*mcp.ClientSession, error) {
		o := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		}}
		var so *mcp.ClientSessionOptions
		if version != "" {
			so = &mcp.ClientSessionOptions{ProtocolVersion: version}
		}
		return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, o).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, so)
	}
	call := func(cs *mcp.ClientSession, code string) func() error {
		p := &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": code}}
		return func() error {
			res, err := cs.CallTool(ctx, p)
			if err == nil && res.IsError {
				err = errors.New("bench: run_ruby failed")
			}
			return err
		}
	}
	base := "in-process eval p50 " + ms(inproc.p50)
	var at2026 stat
	for _, rev := range []string{"2025-11-25", "2026-07-28"} {
		version := rev
		if rev == "2026-07-28" {
			version = "" // the SDK's default: stateless, no initialize
		}
		cs, err := connect(version)
		if err != nil {
			return err
		}
		st, err := measure(call(cs, "lookup(1) + 1"))
		cs.Close()
		if err != nil {
			return err
		}
		if rev == "2026-07-28" {
			at2026 = st
		}
		row(yes(st.p50-inproc.p50 <= mcpRoundTripTarget), "run_ruby round trip over HTTP at MCP "+rev,
			"p50 "+ms(st.p50)+"  p99 "+ms(st.p99), base, ratio(st.p50, inproc.p50), "≤ in-process + "+ms(mcpRoundTripTarget)+" p50")
	}
	// The approval: the question out (a first call answered
	// input_required), then, after the person's pause (not timed; the
	// pool refills in it, as it would while someone reads the question),
	// the answer in and the result out.
	manual, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}, Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}}).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		return err
	}
	defer manual.Close()
	yesAnswer := mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	var d []time.Duration
	for range samples {
		p := &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": "change(1) + 1"}}
		start := time.Now()
		q, err := manual.CallTool(ctx, p)
		if err != nil {
			return err
		}
		asked := time.Since(start)
		if !q.NeedsInput() || q.RequestState == "" {
			return errors.New("bench: the approval was not asked as input_required")
		}
		time.Sleep(thinkTime)
		start = time.Now()
		p.InputResponses, p.RequestState = yesAnswer, q.RequestState
		res, err := manual.CallTool(ctx, p)
		if err == nil && (res.IsError || res.NeedsInput()) {
			err = errors.New("bench: the approved call failed")
		}
		if err != nil {
			return err
		}
		d = append(d, asked+time.Since(start))
		time.Sleep(thinkTime)
	}
	ap := summarize(d)
	// Two round trips (the question, then the retry with the answer) and
	// the program replayed to its call: three plain round trips' worth.
	// The client's own think time is not counted.
	row(yes(ap.p50 <= 3*at2026.p50), "approval round trip at MCP 2026-07-28 (input_required out, answer in, result)",
		"p50 "+ms(ap.p50)+"  p99 "+ms(ap.p99), "round trip without approval p50 "+ms(at2026.p50), ratio(ap.p50, at2026.p50), "≤ 3× the round trip")
	return nil
}
