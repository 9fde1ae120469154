package desk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"text/template"
	"time"

	"github.com/dustin/go-humanize"
	"go.yaml.in/yaml/v3"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

// Script is a scripted model: customer questions, each with the Ruby a
// model would plausibly write for it (mistakes and retries included) and
// the answer it would give from the last program's value. It stands in
// for a real model so the session is the same on every run and can be
// checked against the database.
type Script struct {
	// Customer is who asks, unless a question says otherwise.
	Customer  int64      `yaml:"customer"`
	Questions []Question `yaml:"questions"`
}

// Question is one customer question and the model's work on it.
type Question struct {
	// ID names the question for tests and for --question.
	ID string `yaml:"id"`
	// Customer is who asks; zero means the script's Customer.
	Customer int64 `yaml:"customer"`
	// Ask is the customer's words.
	Ask string `yaml:"ask"`
	// Attempts are the programs the model runs, in order; each after the
	// first follows from the result before it.
	Attempts []Attempt `yaml:"attempts"`
	// Answer is the model's reply, a text/template executed on the last
	// attempt's value (see AnswerFuncs).
	Answer string `yaml:"answer"`
}

// Attempt is one program the model runs.
type Attempt struct {
	// Thought is what the model concluded from the previous result.
	Thought string `yaml:"thought"`
	// Code is the Ruby program.
	Code string `yaml:"code"`
	// Limits override the runtime's for this program (zero fields keep
	// them): how a host gives one request a tighter budget.
	Limits struct {
		Fuel      uint64        `yaml:"fuel"`
		Timeout   time.Duration `yaml:"timeout"`
		ToolCalls int           `yaml:"tool_calls"`
	} `yaml:"limits"`
	// Expect is how the program ends: its status (zero means ok) and,
	// for failures, the error class. A different ending stops the
	// session with an error, so the script cannot drift from what the
	// sandbox does.
	Expect struct {
		Status glovebox.Status `yaml:"status"`
		Class  string          `yaml:"class"`
	} `yaml:"expect"`
}

// LoadScript reads and checks a script file.
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScript(b)
}

// ParseScript parses a script and checks that every question has an ID
// (unique), words, at least one attempt with code and an answer whose
// template parses, and that only the last attempt is expected to succeed.
func ParseScript(b []byte) (*Script, error) {
	var s Script
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("desk: script: %w", err)
	}
	seen := map[string]bool{}
	for i, q := range s.Questions {
		where := fmt.Sprintf("desk: script: question %d (%q)", i+1, q.ID)
		switch {
		case q.ID == "" || seen[q.ID]:
			return nil, fmt.Errorf("%s: missing or repeated id", where)
		case q.Ask == "" || len(q.Attempts) == 0:
			return nil, fmt.Errorf("%s: needs ask and attempts", where)
		case q.Customer == 0 && s.Customer == 0:
			return nil, fmt.Errorf("%s: no customer", where)
		}
		seen[q.ID] = true
		if _, err := answerTemplate(q.Answer); err != nil {
			return nil, fmt.Errorf("%s: answer: %w", where, err)
		}
		for j, a := range q.Attempts {
			ok := a.Expect.Status == "" || a.Expect.Status == glovebox.StatusOK
			if a.Code == "" || ok != (j == len(q.Attempts)-1) {
				return nil, fmt.Errorf("%s: attempt %d: every attempt needs code, and only the last may end ok", where, j+1)
			}
		}
		if s.Questions[i].Customer == 0 {
			s.Questions[i].Customer = s.Customer
		}
	}
	return &s, nil
}

// AnswerFuncs are the functions answer templates may use: money formats
// dollars as "$1,234.56", count formats an integer with separators,
// json writes any value as JSON.
var AnswerFuncs = template.FuncMap{
	"money": func(v any) (string, error) {
		f, ok := number(v)
		if !ok {
			return "", fmt.Errorf("money: %v is not a number", v)
		}
		return "$" + humanize.FormatFloat("#,###.##", f), nil
	},
	"count": func(v any) (string, error) {
		f, ok := number(v)
		if !ok {
			return "", fmt.Errorf("count: %v is not a number", v)
		}
		return humanize.Comma(int64(f)), nil
	},
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case *big.Int:
		f, _ := new(big.Float).SetInt(n).Float64()
		return f, true
	}
	return 0, false
}

func answerTemplate(text string) (*template.Template, error) {
	return template.New("answer").Funcs(AnswerFuncs).Option("missingkey=error").Parse(text)
}

// Outcome is what running one question produced.
type Outcome struct {
	Question Question
	// Attempts has one entry per attempt run, in order: the glovebox
	// result and the JSON the model receives for it.
	Attempts []*codemode.Outcome
	// Answer is the model's reply, from the last result's value.
	Answer string
}

// Value is the last attempt's value: what the answer is built from.
func (o *Outcome) Value() any { return o.Attempts[len(o.Attempts)-1].Result.Value }

// ErrUnexpected wraps an attempt that ended differently from its Expect.
var ErrUnexpected = errors.New("desk: the sandbox did not do what the script expects")

// Run runs q's attempts as q.Customer through the codemode tool over rt
// (so each result is also the JSON a model would read), each with its
// limit overrides, checks each ending against its Expect and builds the
// answer. It fails with ErrUnexpected when an attempt ends otherwise,
// and with the runtime's error for host-side failures.
func (q Question) Run(ctx context.Context, rt *glovebox.Runtime) (*Outcome, error) {
	ctx = WithCustomer(ctx, q.Customer)
	out := &Outcome{Question: q}
	for i, a := range q.Attempts {
		run := rt
		if a.Limits.Fuel != 0 || a.Limits.Timeout != 0 || a.Limits.ToolCalls != 0 {
			l := rt.Limits()
			if a.Limits.Fuel != 0 {
				l.Fuel = a.Limits.Fuel
			}
			if a.Limits.Timeout != 0 {
				l.Timeout = a.Limits.Timeout
			}
			if a.Limits.ToolCalls != 0 {
				l.ToolCalls = a.Limits.ToolCalls
			}
			var err error
			if run, err = rt.WithLimits(l); err != nil {
				return nil, err
			}
		}
		tool, err := codemode.New(codemode.Config{Runtime: run})
		if err != nil {
			return nil, err
		}
		co, err := tool.Run(ctx, a.Code)
		if err != nil {
			return nil, err
		}
		out.Attempts = append(out.Attempts, co)
		res := co.Result
		want := a.Expect.Status
		if want == "" {
			want = glovebox.StatusOK
		}
		got := ""
		if res.Error != nil {
			got = res.Error.Class
		}
		if res.Status != want || (a.Expect.Class != "" && got != a.Expect.Class) {
			wanted, ended := string(want), string(res.Status)
			if a.Expect.Class != "" {
				wanted += " (" + a.Expect.Class + ")"
			}
			if res.Error != nil {
				ended += fmt.Sprintf(" (%s: %s)", res.Error.Class, res.Error.Message)
			}
			return out, fmt.Errorf("%w: question %s, attempt %d: want %s, got %s", ErrUnexpected, q.ID, i+1, wanted, ended)
		}
	}
	var err error
	out.Answer, err = q.Reply(out.Value())
	return out, err
}

// Reply is the model's answer when its last program's value is v: the
// Answer template executed on v (numbers may be int64, float64 or
// *big.Int, as glovebox or encoding/json give them).
func (q Question) Reply(v any) (string, error) {
	t, err := answerTemplate(q.Answer)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, v); err != nil {
		return "", fmt.Errorf("desk: question %s: answer: %w", q.ID, err)
	}
	return strings.TrimSpace(b.String()), nil
}
