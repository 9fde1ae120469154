// Command approval shows an eval paused for a person's approval in one
// process and approved in another. The first process runs a program that
// asks to change a customer's plan; change_plan needs approval, so the
// eval suspends there, its sealed state goes to a file, and the process
// exits. The second process (the same binary, later, anywhere with the
// key) reads the file, approves the call (the tool runs there) and
// prints the outcome.
//
//	go run ./examples/approval request plan.state   # pauses, writes plan.state, exits
//	go run ./examples/approval approve plan.state   # approves: the plan changes
//	go run ./examples/approval                      # both, in two processes
//
// The key that seals the state is kept next to it (plan.state.key, 0600)
// to keep the example short; a service keeps its keys in its secret store
// and puts the state wherever its requests travel (a database row, a
// client's hidden field): it is encrypted and authenticated.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// program is what a model might write for "move Ada to the team plan".
const program = `c = find_customer(email: "ada@example.com")
puts "#{c["name"]} is on #{c["plan"]}"
r = change_plan(customer_id: c["id"], plan: "team")
puts "changed: #{r["old"]} -> #{r["new"]}"
r`

// plans is the example's customer database.
var plans = map[string]string{"c-1": "starter"}

func runtime(ctx context.Context, keyFile string) (*glovebox.Runtime, error) {
	secret, err := key(keyFile)
	if err != nil {
		return nil, err
	}
	keys, err := glovebox.NewKeyring(glovebox.StateKey{ID: "example", Secret: secret})
	if err != nil {
		return nil, err
	}
	var tools glovebox.Toolset
	tools.Func("find_customer", func(q struct {
		Email string `json:"email"`
	}) map[string]any {
		return map[string]any{"id": "c-1", "name": "Ada", "email": q.Email, "plan": plans["c-1"]}
	})
	tools.Func("change_plan", func(c struct {
		CustomerID string `json:"customer_id"`
		Plan       string `json:"plan"`
	}) map[string]any {
		old := plans[c.CustomerID]
		plans[c.CustomerID] = c.Plan
		fmt.Printf("[pid %d] change_plan ran: %s %s -> %s\n", os.Getpid(), c.CustomerID, old, c.Plan)
		return map[string]any{"old": old, "new": c.Plan}
	})
	if err := tools.RequireApproval("change_plan"); err != nil {
		return nil, err
	}
	return glovebox.New(ctx, glovebox.Config{
		Tools:     &tools,
		StateKeys: keys,
		// Nobody is here to decide: every approval waits (the eval
		// suspends at the call).
		Hooks: glovebox.Hooks{Approver: func(context.Context, string, glovebox.Args) error {
			return glovebox.SuspendCall("a support lead approves plan changes")
		}},
	})
}

// key reads the key file, or makes it.
func key(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil {
		return hex.DecodeString(strings.TrimSpace(string(b)))
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	return secret, os.WriteFile(path, []byte(hex.EncodeToString(secret)), 0o600)
}

func request(ctx context.Context, file string) error {
	rt, err := runtime(ctx, file+".key")
	if err != nil {
		return err
	}
	defer rt.Close()
	res, err := rt.Eval(ctx, program)
	if err != nil {
		return err
	}
	fmt.Print(res.Stdout)
	if res.Status != glovebox.StatusSuspended {
		return fmt.Errorf("the eval ended %s, not suspended: %v", res.Status, res.Error)
	}
	p := res.Pending
	fmt.Printf("[pid %d] waiting for approval: %s(%v) — %s (state %s, %d bytes, written to %s)\n",
		os.Getpid(), p.Name, p.Args.Keyword, p.Reason, p.ID, len(res.State), file)
	return os.WriteFile(file, res.State, 0o600)
}

func approve(ctx context.Context, file string) error {
	state, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	rt, err := runtime(ctx, file+".key")
	if err != nil {
		return err
	}
	defer rt.Close()
	// The output streamed here is what the program printed after the
	// pause; res.Stdout holds all of it.
	res, err := rt.Continue(ctx, state, glovebox.Answer{Approved: true}, glovebox.WithOutput(os.Stdout, os.Stderr))
	if err != nil {
		return err
	}
	if res.Status != glovebox.StatusOK {
		return fmt.Errorf("the eval ended %s: %v", res.Status, res.Error)
	}
	last := res.ToolCalls[len(res.ToolCalls)-1]
	fmt.Printf("[pid %d] approved; the eval returned %v; the transcript says %s(%v): %s, %s\n",
		os.Getpid(), res.Value, last.Name, last.Args.Keyword, last.Approval, last.Outcome)
	return nil
}

func main() {
	ctx := context.Background()
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "request":
		err = request(ctx, os.Args[2])
	case len(os.Args) == 3 && os.Args[1] == "approve":
		err = approve(ctx, os.Args[2])
	case len(os.Args) == 1:
		err = both()
	default:
		err = errors.New("usage: approval [request FILE | approve FILE]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "approval:", err)
		os.Exit(1)
	}
}

// both runs the two steps as two processes of this binary.
func both() error {
	dir, err := os.MkdirTemp("", "approval")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "plan.state")
	for _, step := range []string{"request", "approve"} {
		cmd := exec.Command(os.Args[0], step, file)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := spawn.Run(cmd); err != nil { // no descriptor of ours reaches the child
			return fmt.Errorf("%s: %w", step, err)
		}
	}
	return nil
}
