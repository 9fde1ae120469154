// Command supportdesk shows glovebox's main job end to end: a customer
// asks a support desk a question, a model answers by writing one Ruby
// program against tools scoped to that customer, glovebox runs it on a
// real SQLite database, and the model replies from the result.
//
//	go run ./examples/supportdesk                 # the scripted session
//	go run ./examples/supportdesk --customer 7 --json -e 'orders.size'
//	ANTHROPIC_API_KEY=... go run ./examples/supportdesk --ask "What did I spend in March?"
//
// The database is generated from a seed (see package desk) into a
// temporary directory unless --db names a file; an existing file is used
// as it is. The scripted model (script.yaml, embedded) replays what a
// model would write, mistakes included; every answer is checked against
// SQL in desk's tests.
//
// With ANTHROPIC_API_KEY or OPENAI_API_KEY set (or --provider), a real
// model answers the script's questions (or --ask) instead, through the
// codemode SDK adapters, at most --max-rounds tool rounds per question.
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
)

//go:embed script.yaml
var defaultScript []byte

// Limits is what one program gets: 5 s of wall-clock time and 2e9 units
// of fuel (about four million iterations of a Ruby while loop; see
// glovebox.Limits.Fuel). Answers from a support desk need far less.
var Limits = glovebox.Limits{Timeout: 5 * time.Second, Fuel: 2_000_000_000}

type options struct {
	db       string
	seed     uint64
	customer int64
	code     string
	json     bool
	script   string
	question string

	provider  string
	model     string
	maxRounds int
	ask       string
}

func main() {
	var o options
	cmd := &cobra.Command{
		Use:   "supportdesk",
		Short: "Code mode over a support-desk database, scripted or for one program",
		Long: `supportdesk runs the scripted support-desk session: customer questions,
the Ruby a model writes for each (mistakes and retries included), the tool
calls glovebox made, the result JSON and the model's answer.

With -e it runs one program as --customer and prints its result.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.db, "db", "", "database file; created from --seed if missing (default: a fresh one in a temporary directory)")
	f.Uint64Var(&o.seed, "seed", desk.DefaultSeed, "seed of a generated database")
	f.Int64Var(&o.customer, "customer", desk.DemoCustomer, "customer who asks (with -e or --ask)")
	f.StringVarP(&o.code, "eval", "e", "", "run this Ruby program instead of the scripted session")
	f.BoolVar(&o.json, "json", false, "with -e: print the result as JSON, tool calls included")
	f.StringVar(&o.script, "script", "", "scripted model to replay (default: the embedded script.yaml)")
	f.StringVar(&o.question, "question", "", "only the script's question with this id")
	f.StringVar(&o.provider, "provider", providerAuto, "who answers: script, anthropic, openai, or auto (anthropic if ANTHROPIC_API_KEY is set, else openai if OPENAI_API_KEY is, else the script)")
	f.StringVar(&o.model, "model", "", "model name for a real provider (default "+defaultAnthropicModel+" or "+defaultOpenAIModel+")")
	f.IntVar(&o.maxRounds, "max-rounds", DefaultMaxRounds, "most model turns that run tools, per question (real models)")
	f.StringVar(&o.ask, "ask", "", "ask a real model this question as --customer, instead of the script's questions")
	// Ctrl-C cancels the running eval (glovebox stops it within about
	// 10 ms) so the temporary database is still removed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		var exit exitCode
		if errors.As(err, &exit) {
			os.Exit(int(exit))
		}
		fmt.Fprintln(os.Stderr, "supportdesk:", err)
		os.Exit(2)
	}
}

// exitCode ends the command with a status without printing more.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run runs the command: output to w, and the database report to w for
// the session but to errw with -e, so that --json output is only JSON.
func run(ctx context.Context, w, errw io.Writer, o options) error {
	report := w
	if o.code != "" {
		report = errw
	}
	if o.json && o.code == "" {
		return errors.New("--json needs -e CODE")
	}
	var ag agent
	if o.code == "" {
		var err error
		if ag, err = chooseAgent(o); err != nil {
			return err
		}
	}
	b := defaultScript
	if o.script != "" {
		var err error
		if b, err = os.ReadFile(o.script); err != nil {
			return err
		}
	}
	s, err := desk.ParseScript(b)
	if err != nil {
		return err
	}
	d, err := openDesk(ctx, o.db, o.seed, report)
	if err != nil {
		return err
	}
	defer d.Close()
	switch {
	case o.code != "":
		return evalOne(ctx, w, d, o)
	case ag == nil:
		return replay(ctx, w, d, s, o.question)
	case o.ask != "":
		return converse(ctx, w, d, ag, []question{{label: "your question", customer: o.customer, ask: o.ask}})
	}
	var qs []question
	for i, q := range s.Questions {
		if o.question == "" || q.ID == o.question {
			qs = append(qs, question{fmt.Sprintf("%d/%d %s", i+1, len(s.Questions), q.ID), q.Customer, q.Ask})
		}
	}
	if len(qs) == 0 {
		return fmt.Errorf("the script has no question %q", o.question)
	}
	return converse(ctx, w, d, ag, qs)
}

// deskEnv is an open database with its tools and a Runtime that grants them.
type deskEnv struct {
	db    *desk.DB
	tools *desk.Tools
	rt    *glovebox.Runtime
	dir   string // temporary directory to remove, if any
}

func (d *deskEnv) Close() error {
	d.rt.Close()
	err := d.db.Close()
	if d.dir != "" {
		os.RemoveAll(d.dir)
	}
	return err
}

// openDesk opens (or first generates) the database and makes the Runtime.
func openDesk(ctx context.Context, path string, seed uint64, w io.Writer) (_ *deskEnv, err error) {
	d := &deskEnv{}
	defer func() {
		if err != nil && d.dir != "" {
			os.RemoveAll(d.dir)
		}
	}()
	if path == "" {
		if d.dir, err = os.MkdirTemp("", "supportdesk-"); err != nil {
			return nil, err
		}
		path = filepath.Join(d.dir, "desk.db")
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		start := time.Now()
		st, err := desk.Generate(ctx, path, desk.Options{Seed: seed})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "Generated %s in %v (seed %d): %d customers, %d orders with %d line items, %d tickets.\n",
			path, time.Since(start).Round(time.Millisecond), seed, st.Customers, st.Orders, st.OrderItems, st.Tickets)
	} else {
		fmt.Fprintf(w, "Using the existing database %s.\n", path)
	}
	if d.db, err = desk.Open(ctx, path); err != nil {
		return nil, err
	}
	d.tools = desk.NewTools(d.db)
	var tools glovebox.Toolset
	if err := d.tools.Register(&tools); err != nil {
		d.db.Close()
		return nil, err
	}
	d.rt, err = glovebox.New(ctx, glovebox.Config{
		Tools:  &tools,
		Hooks:  glovebox.Hooks{SanitizeError: desk.SanitizeError},
		Limits: Limits,
		Progress: func(step string) func() {
			fmt.Fprintf(os.Stderr, "glovebox: %s...\n", step)
			start := time.Now()
			return func() { fmt.Fprintf(os.Stderr, "glovebox: done in %.1fs\n", time.Since(start).Seconds()) }
		},
	})
	if err != nil {
		d.db.Close()
		return nil, err
	}
	return d, nil
}
