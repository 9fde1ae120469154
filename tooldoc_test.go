package glovebox_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

type orderQuery struct {
	Status string    `json:"status,omitempty" jsonschema_description:"shipped, pending or cancelled"`
	Since  time.Time `json:"since,omitzero"`
	Limit  int       `json:"limit" jsonschema:"required"`
	secret string
	Skip   string `json:"-"`
	paging
}

type paging struct {
	Page  uint `json:"page,omitempty"`
	Limit int  `json:"shadowed_limit"`
}

type order struct {
	ID    int64    `json:"id"`
	Total float64  `json:"total"`
	Tags  []string `json:"tags"`
	Note  *string  `json:"note,omitempty"`
	Next  *order   `json:"next,omitempty"`
}

// Flags shows how a TextUnmarshaler parameter is described.
type Flags struct{}

func (*Flags) UnmarshalText([]byte) error { return nil }

func TestToolDocInference(t *testing.T) {
	cases := []struct {
		name   string
		fn     any
		params string // name:schema, one per parameter, | between
		result string
	}{
		{"no params", func() int { return 0 }, "", `{"type":"integer"}`},
		{"ctx skipped", func(context.Context, string, bool) error { return nil }, `arg1*:{"type":"string"}|arg2*:{"type":"boolean"}`, ""},
		{"numbers", func(int8, uint16, float32, *big.Int) {}, `arg1*:{"type":"integer"}|arg2*:{"type":"integer","minimum":0}|arg3*:{"type":"number"}|arg4*:{"type":"integer"}`, ""},
		{"any and nested", func(any, []map[string]int) {}, `arg1*:{}|arg2*:{"type":"array","items":{"type":"object","additionalProperties":{"type":"integer"}}}`, ""},
		{"variadic", func(string, ...int) {}, `arg1*:{"type":"string"}|arg2...:{"type":"integer"}`, ""},
		{"struct keywords", func(context.Context, orderQuery) ([]order, error) { return nil, nil },
			`order_querykw:{"type":"object","properties":{"status":{"type":"string","description":"shipped, pending or cancelled"},"since":{"type":"string","format":"date-time"},"limit":{"type":"integer"},"page":{"type":"integer","minimum":0},"shadowed_limit":{"type":"integer"}},"required":["limit"]}`,
			`{"type":["array","null"],"items":{"type":"object","properties":{"id":{"type":"integer"},"total":{"type":"number"},"tags":{"type":["array","null"],"items":{"type":"string"}},"note":{"type":["string","null"]},"next":{"type":["object","null"]}},"required":["id","total","tags"]}}`},
		{"map keywords after positional", func(int, map[string]any) {}, `arg1*:{"type":"integer"}|arg2kw:{"type":"object","additionalProperties":{}}`, ""},
		{"same struct twice", func(paging, paging) {}, `arg1*:{"type":"object","properties":{"page":{"type":"integer","minimum":0},"shadowed_limit":{"type":"integer"}}}|arg2kw:{"type":"object","properties":{"page":{"type":"integer","minimum":0},"shadowed_limit":{"type":"integer"}}}`, ""},
		{"text unmarshaler and bytes", func(Flags, []byte) {}, `arg1*:{"type":"string"}|arg2*:{"type":"string","format":"byte","description":"base64"}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ts glovebox.Toolset
			if err := ts.Func("tool", c.fn); err != nil {
				t.Fatal(err)
			}
			doc := docsOf(t, &ts)[0]
			var got []string
			for _, p := range doc.Params {
				s := p.Name
				if p.Required {
					s += "*"
				}
				if p.Variadic {
					s += "..."
				}
				if p.Keywords {
					s += "kw"
				}
				got = append(got, s+":"+string(p.Schema))
			}
			if g := strings.Join(got, "|"); g != c.params {
				t.Errorf("params\n got %s\nwant %s", g, c.params)
			}
			if string(doc.Result) != c.result {
				t.Errorf("result\n got %s\nwant %s", doc.Result, c.result)
			}
			for _, p := range doc.Params {
				if !json.Valid(p.Schema) {
					t.Errorf("schema of %s is not JSON: %s", p.Name, p.Schema)
				}
			}
		})
	}
}

// docsOf returns the ToolDocs a Runtime made from ts reports.
func docsOf(t *testing.T, ts *glovebox.Toolset) []glovebox.ToolDoc {
	t.Helper()
	return newRuntime(t, glovebox.Config{Tools: ts, PoolSize: -1}).ToolDocs()
}

func TestToolDocDescribe(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.Object(&account{}, glovebox.Only("UserInfo", "ChangePlan")); err != nil {
		t.Fatal(err)
	}
	if err := ts.Add("lookup", func(context.Context, glovebox.Args) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Func("untouched", func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	err := ts.Describe("change_plan", glovebox.ToolDoc{
		Description: "Moves the customer to another plan.",
		Params:      []glovebox.Param{{Name: "plan", Description: "basic or premium", Required: false}},
		Returns:     "the new plan",
		Example:     `change_plan("premium")`,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = ts.Describe("lookup", glovebox.ToolDoc{
		Description: "Looks an order up.",
		Params:      []glovebox.Param{{Name: "id", Required: true, Schema: json.RawMessage(`{"type":"integer"}`)}, {Name: "opts"}},
		Result:      json.RawMessage(`{"type":"object"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Errors, each an ErrInvalidTool naming what is wrong.
	bad := []struct {
		name string
		doc  glovebox.ToolDoc
		want string
	}{
		{"nope", glovebox.ToolDoc{}, "no tool has that name"},
		{"change_plan", glovebox.ToolDoc{}, "already described"},
		{"user_info", glovebox.ToolDoc{Name: "other"}, `names "other"`},
		{"user_info", glovebox.ToolDoc{Params: []glovebox.Param{{Name: "x"}}}, "lists 1 parameters, but the function takes 0"},
		{"untouched", glovebox.ToolDoc{Params: []glovebox.Param{{}}}, "parameter 1 has no name"},
		{"untouched", glovebox.ToolDoc{Params: []glovebox.Param{{Name: "s", Schema: json.RawMessage(`"string"`)}}}, "not a JSON object"},
		{"untouched", glovebox.ToolDoc{Result: json.RawMessage(`{`)}, "Result: schema"},
	}
	for _, b := range bad {
		if err := ts.Describe(b.name, b.doc); !errors.Is(err, glovebox.ErrInvalidTool) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Describe(%q, %+v) = %v, want ErrInvalidTool containing %q", b.name, b.doc, err, b.want)
		}
	}
	// Merge carries signatures and documentation along.
	var merged glovebox.Toolset
	if err := merged.Merge(&ts); err != nil {
		t.Fatal(err)
	}
	docs := docsOf(t, &merged)
	var names []string
	for _, d := range docs {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, ","); got != "change_plan,lookup,untouched,user_info" {
		t.Fatalf("ToolDocs names %s, want every tool, sorted", got)
	}
	cp := docs[0]
	if cp.Description != "Moves the customer to another plan." || cp.Returns != "the new plan" || cp.Example != `change_plan("premium")` {
		t.Errorf("change_plan doc %+v", cp)
	}
	if p := cp.Params[0]; p.Name != "plan" || !p.Required || string(p.Schema) != `{"type":"string"}` || p.Description != "basic or premium" {
		t.Errorf("change_plan param %+v: want the documented name over the inferred schema, required by the signature", p)
	}
	if string(cp.Result) != `{"type":["object","null"],"additionalProperties":{}}` {
		t.Errorf("change_plan result schema %s", cp.Result)
	}
	lk := docs[1]
	if len(lk.Params) != 2 || string(lk.Params[1].Schema) != `{}` || !lk.Params[0].Required || string(lk.Result) != `{"type":"object"}` {
		t.Errorf("Add tool doc %+v: want the params as given, {} for a missing schema", lk)
	}
	if u := docs[2]; u.Description != "" || len(u.Params) != 1 || u.Params[0].Name != "arg1" {
		t.Errorf("undescribed tool doc %+v: want its inferred shape", u)
	}
	if ui := docs[3]; ui.Params == nil || len(ui.Params) != 0 {
		t.Errorf("user_info params %#v: want an empty, non-nil list (known to take none)", ui.Params)
	}
	var empty glovebox.Toolset
	if err := empty.Describe("x", glovebox.ToolDoc{}); err == nil || !strings.Contains(err.Error(), "the set is empty") {
		t.Errorf("Describe on an empty set: %v", err)
	}
	// The caller owns what ToolDocs returns.
	rt := newRuntime(t, glovebox.Config{Tools: &ts, PoolSize: -1})
	d := rt.ToolDocs()
	d[0].Params[0].Schema[2] = 'X'
	if again := rt.ToolDocs(); string(again[0].Params[0].Schema) != `{"type":"string"}` {
		t.Errorf("ToolDocs shares memory with the Runtime: %s", again[0].Params[0].Schema)
	}
	if got := newRuntime(t, glovebox.Config{PoolSize: -1}).ToolDocs(); len(got) != 0 {
		t.Errorf("a Runtime without tools has docs %+v", got)
	}
}
