package anthropictool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/anthropictool"
	"github.com/gloveboxhq/glovebox/codemode/internal/codemodetest"
)

func TestMain(m *testing.M) { codemodetest.Main(m) }

const question = codemodetest.Question

func newClient(url string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(url), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
}

// message is a Messages API reply in the wire format.
func message(n int, stop string, content ...map[string]any) map[string]any {
	return map[string]any{
		"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant", "model": "claude-test",
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 100, "output_tokens": 10},
	}
}

func toolUse(id, code string) map[string]any {
	return map[string]any{"type": "tool_use", "id": id, "name": "run_ruby", "input": map[string]any{"code": code}}
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

// toolResults returns the tool_result blocks of the request's last message.
func toolResults(req map[string]any) []any {
	msgs, _ := req["messages"].([]any)
	if len(msgs) == 0 {
		return nil
	}
	c, _ := codemodetest.Dig(msgs[len(msgs)-1], "content").([]any)
	return c
}

// resultJSON decodes a tool_result block's text, the codemode output.
func resultJSON(t *testing.T, block any) map[string]any {
	t.Helper()
	s, _ := codemodetest.Dig(block, "content", 0, "text").(string)
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("tool_result text is not JSON: %v: %q (block %v)", err, s, block)
	}
	return m
}

// TestRunThroughFakeAPI drives the real SDK client against a local server
// speaking the Messages API: three tool rounds (one ok, one with two
// failing programs, one with malformed input) and a final answer that
// uses the value computed in the sandbox.
func TestRunThroughFakeAPI(t *testing.T) {
	tool := codemodetest.ShopTool(t)
	api := codemodetest.NewFakeAPI(t, "/v1/messages", func(n int, req map[string]any) (int, any) {
		switch n {
		case 0:
			return 200, message(n, "tool_use", text("Let me add them up."),
				toolUse("toolu_1", `orders(status: "shipped").sum { _1["total"] }.round(2)`))
		case 1:
			return 200, message(n, "tool_use",
				toolUse("toolu_2", `orders(status: "shipped").sum { _1[:total] }`),
				toolUse("toolu_3", "i = 0\nloop { i += 1 }"))
		case 2:
			return 200, message(n, "tool_use", map[string]any{"type": "tool_use", "id": "toolu_4", "name": "run_ruby", "input": map[string]any{"program": "1"}})
		default:
			// The answer quotes the value the sandbox returned in round 1.
			s, _ := codemodetest.Dig(req, "messages", 2, "content", 0, "content", 0, "text").(string)
			var m map[string]any
			_ = json.Unmarshal([]byte(s), &m)
			v := m["value"]
			return 200, message(n, "end_turn", text(codemodetest.Answer(v)))
		}
	})
	answer, tr, err := anthropictool.Run(context.Background(), newClient(api.URL), tool,
		anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024}, question, 5)
	reqs := codemodetest.CheckRun(t, api, answer, err, 4)
	// The first request: the question and the tool definition.
	if got := api.Header(0).Get("X-Api-Key"); got != "test-key" {
		t.Errorf("x-api-key %q", got)
	}
	r0 := reqs[0]
	if codemodetest.Dig(r0, "model") != "claude-test" || codemodetest.Dig(r0, "max_tokens") != 1024.0 {
		t.Errorf("model/max_tokens not sent: %v", r0)
	}
	if codemodetest.Dig(r0, "messages", 0, "role") != "user" || codemodetest.Dig(r0, "messages", 0, "content", 0, "text") != question {
		t.Errorf("first message %v", codemodetest.Dig(r0, "messages"))
	}
	def := codemodetest.Dig(r0, "tools", 0)
	if codemodetest.Dig(def, "name") != "run_ruby" || codemodetest.Dig(def, "description") != tool.Description() {
		t.Errorf("tool definition name/description: %v", codemodetest.Dig(def, "name"))
	}
	if codemodetest.Dig(def, "input_schema", "type") != "object" || codemodetest.Dig(def, "input_schema", "properties", "code", "type") != "string" ||
		codemodetest.Dig(def, "input_schema", "required", 0) != "code" || codemodetest.Dig(def, "input_schema", "additionalProperties") != false {
		t.Errorf("input_schema %v", codemodetest.Dig(def, "input_schema"))
	}
	if n := len(codemodetest.Dig(r0, "tools").([]any)); n != 1 {
		t.Errorf("%d tools sent, want 1", n)
	}
	// Round 1's result: ok, not an error, the model's turn echoed before it.
	if codemodetest.Dig(reqs[1], "messages", 1, "role") != "assistant" || codemodetest.Dig(reqs[1], "messages", 1, "content", 1, "id") != "toolu_1" {
		t.Errorf("the model's tool_use turn was not sent back: %v", codemodetest.Dig(reqs[1], "messages", 1))
	}
	type want struct {
		id      string
		isError bool
		status  string
		class   string
	}
	check := func(req map[string]any, wants ...want) {
		t.Helper()
		blocks := toolResults(req)
		if len(blocks) != len(wants) {
			t.Fatalf("%d tool results, want %d: %v", len(blocks), len(wants), blocks)
		}
		for i, w := range wants {
			b := blocks[i]
			if codemodetest.Dig(b, "type") != "tool_result" || codemodetest.Dig(b, "tool_use_id") != w.id || codemodetest.Dig(b, "is_error") != w.isError {
				t.Errorf("tool_result %d: %v, want id %s is_error %v", i, b, w.id, w.isError)
			}
			m := resultJSON(t, b)
			if m["status"] != w.status || (w.class != "" && codemodetest.Dig(m, "error", "class") != w.class) {
				t.Errorf("tool_result %s: %v, want status %s class %s", w.id, m, w.status, w.class)
			}
		}
	}
	check(reqs[1], want{"toolu_1", false, "ok", ""})
	if v := resultJSON(t, toolResults(reqs[1])[0])["value"]; v != codemodetest.ShippedTotal {
		t.Errorf("round 1 value %v, want %v", v, codemodetest.ShippedTotal)
	}
	check(reqs[2], want{"toolu_2", true, "error", "TypeError"}, want{"toolu_3", true, "fuel_exhausted", "Glovebox::FuelExhausted"})
	check(reqs[3], want{"toolu_4", true, "invalid_input", "InvalidInput"})
	// The transcript.
	if len(tr.Steps) != 4 || tr.Steps[0].Round != 1 || tr.Steps[2].Round != 2 || tr.Steps[3].ID != "toolu_4" {
		t.Errorf("steps %+v", tr.Steps)
	}
	if tr.Steps[0].Outcome.Result.Value != codemodetest.ShippedTotal || tr.Steps[3].Outcome.Result != nil {
		t.Errorf("step outcomes %+v / %+v", tr.Steps[0].Outcome, tr.Steps[3].Outcome)
	}
	if len(tr.Messages) != 8 || tr.InputTokens != 400 || tr.OutputTokens != 40 {
		t.Errorf("transcript: %d messages, usage %d/%d", len(tr.Messages), tr.InputTokens, tr.OutputTokens)
	}
}

func TestRunLimitsAndFailures(t *testing.T) {
	tool := codemodetest.ShopTool(t)
	params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 256}
	t.Run("max rounds", func(t *testing.T) {
		api := codemodetest.NewFakeAPI(t, "/v1/messages", func(n int, _ map[string]any) (int, any) {
			return 200, message(n, "tool_use", toolUse(fmt.Sprintf("toolu_%d", n), "1 + 1"))
		})
		_, tr, err := anthropictool.Run(context.Background(), newClient(api.URL), tool, params, question, 2)
		codemodetest.CheckMaxRounds(t, api, err, 2, len(tr.Steps))
	})
	t.Run("max tokens", func(t *testing.T) {
		api := codemodetest.NewFakeAPI(t, "/v1/messages", func(n int, _ map[string]any) (int, any) {
			return 200, message(n, "max_tokens", text("The total is"))
		})
		answer, _, err := anthropictool.Run(context.Background(), newClient(api.URL), tool, params, question, 0)
		if !errors.Is(err, codemode.ErrNoAnswer) || answer != "The total is" {
			t.Errorf("Run = %q, %v; want the partial text and ErrNoAnswer", answer, err)
		}
	})
	t.Run("API error", func(t *testing.T) {
		api := codemodetest.NewFakeAPI(t, "/v1/messages", func(int, map[string]any) (int, any) {
			return 400, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": "max_tokens: too large"}}
		})
		_, _, err := anthropictool.Run(context.Background(), newClient(api.URL), tool, params, question, 0)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
			t.Errorf("err %v, want an *anthropic.Error with status 400", err)
		}
	})
	t.Run("negative rounds", func(t *testing.T) {
		if _, _, err := anthropictool.Run(context.Background(), newClient("http://127.0.0.1:1"), tool, params, question, -1); !errors.Is(err, codemode.ErrInvalidConfig) {
			t.Errorf("err %v, want ErrInvalidConfig", err)
		}
	})
	t.Run("unknown tool name", func(t *testing.T) {
		block, out, err := anthropictool.Handle(context.Background(), tool, anthropic.ToolUseBlock{ID: "toolu_x", Name: "bash", Input: json.RawMessage(`{"code":"ls"}`)})
		if err != nil || !out.IsError || block.OfToolResult == nil || !block.OfToolResult.IsError.Value || block.OfToolResult.ToolUseID != "toolu_x" {
			t.Errorf("Handle(bash) = %+v, %+v, %v", block.OfToolResult, out, err)
		}
	})
}
