package openaitool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/internal/codemodetest"
	"github.com/gloveboxhq/glovebox/codemode/openaitool"
)

func TestMain(m *testing.M) { codemodetest.Main(m) }

const question = codemodetest.Question

func newClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
}

// completion is a Chat Completions reply in the wire format.
func completion(n int, finish string, content any, calls ...map[string]any) map[string]any {
	msg := map[string]any{"role": "assistant", "content": content, "refusal": nil}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1764500000, "model": "gpt-test",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
	}
}

func call(id, arguments string) map[string]any {
	return map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "run_ruby", "arguments": arguments}}
}

func code(src string) string {
	b, _ := json.Marshal(map[string]string{"code": src})
	return string(b)
}

// toolMessages returns the tool messages at the end of a request.
func toolMessages(req map[string]any) []any {
	msgs, _ := req["messages"].([]any)
	i := len(msgs)
	for i > 0 && codemodetest.Dig(msgs[i-1], "role") == "tool" {
		i--
	}
	return msgs[i:]
}

func resultJSON(t *testing.T, msg any) map[string]any {
	t.Helper()
	s, _ := codemodetest.Dig(msg, "content").(string)
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("tool message content is not JSON: %v: %q", err, s)
	}
	return m
}

// TestRunThroughFakeAPI drives the real SDK client against a local server
// speaking Chat Completions: three tool rounds (one ok, one with two
// failing programs, one with arguments that are not JSON) and a final
// answer that uses the value computed in the sandbox.
func TestRunThroughFakeAPI(t *testing.T) {
	tool := codemodetest.ShopTool(t)
	api := codemodetest.NewFakeAPI(t, "/chat/completions", func(n int, req map[string]any) (int, any) {
		switch n {
		case 0:
			return 200, completion(n, "tool_calls", "Let me add them up.",
				call("call_1", code(`orders(status: "shipped").sum { _1["total"] }.round(2)`)))
		case 1:
			return 200, completion(n, "tool_calls", nil,
				call("call_2", code(`orders(status: "shipped").sum { _1[:total] }`)),
				call("call_3", code("i = 0\nloop { i += 1 }")))
		case 2:
			return 200, completion(n, "tool_calls", nil, call("call_4", `{"code": "1 +`))
		default:
			// The answer quotes the value the sandbox returned in round 1.
			s, _ := codemodetest.Dig(req, "messages", 2, "content").(string)
			var m map[string]any
			_ = json.Unmarshal([]byte(s), &m)
			return 200, completion(n, "stop", codemodetest.Answer(m["value"]))
		}
	})
	answer, tr, err := openaitool.Run(context.Background(), newClient(api.URL), tool,
		openai.ChatCompletionNewParams{Model: "gpt-test"}, question, 5)
	reqs := codemodetest.CheckRun(t, api, answer, err, 4)
	if got := api.Header(0).Get("Authorization"); got != "Bearer test-key" {
		t.Errorf("Authorization %q", got)
	}
	r0 := reqs[0]
	if codemodetest.Dig(r0, "model") != "gpt-test" || codemodetest.Dig(r0, "messages", 0, "role") != "user" || codemodetest.Dig(r0, "messages", 0, "content") != question {
		t.Errorf("first request %v", r0)
	}
	def := codemodetest.Dig(r0, "tools", 0)
	if codemodetest.Dig(def, "type") != "function" || codemodetest.Dig(def, "function", "name") != "run_ruby" || codemodetest.Dig(def, "function", "description") != tool.Description() {
		t.Errorf("tool definition %v", codemodetest.Dig(def, "function", "name"))
	}
	ps := codemodetest.Dig(def, "function", "parameters")
	if codemodetest.Dig(ps, "type") != "object" || codemodetest.Dig(ps, "properties", "code", "type") != "string" || codemodetest.Dig(ps, "required", 0) != "code" {
		t.Errorf("parameters %v", ps)
	}
	// Each round's assistant message goes back before its tool messages.
	if codemodetest.Dig(reqs[1], "messages", 1, "role") != "assistant" || codemodetest.Dig(reqs[1], "messages", 1, "tool_calls", 0, "id") != "call_1" {
		t.Errorf("the assistant's tool calls were not sent back: %v", codemodetest.Dig(reqs[1], "messages", 1))
	}
	type want struct {
		id, status, class string
	}
	check := func(req map[string]any, wants ...want) {
		t.Helper()
		tm := toolMessages(req)
		if len(tm) != len(wants) {
			t.Fatalf("%d tool messages, want %d", len(tm), len(wants))
		}
		for i, w := range wants {
			m := resultJSON(t, tm[i])
			if codemodetest.Dig(tm[i], "tool_call_id") != w.id || m["status"] != w.status || (w.class != "" && codemodetest.Dig(m, "error", "class") != w.class) {
				t.Errorf("tool message %d: %v, want %s with status %s class %s", i, tm[i], w.id, w.status, w.class)
			}
		}
	}
	check(reqs[1], want{"call_1", "ok", ""})
	if v := resultJSON(t, toolMessages(reqs[1])[0])["value"]; v != codemodetest.ShippedTotal {
		t.Errorf("round 1 value %v", v)
	}
	check(reqs[2], want{"call_2", "error", "TypeError"}, want{"call_3", "fuel_exhausted", "Glovebox::FuelExhausted"})
	check(reqs[3], want{"call_4", "invalid_input", "InvalidInput"})
	if len(tr.Steps) != 4 || tr.Steps[1].Round != 2 || tr.Steps[3].ID != "call_4" || !tr.Steps[1].Outcome.IsError || tr.Steps[0].Outcome.IsError {
		t.Errorf("steps %+v", tr.Steps)
	}
	if len(tr.Messages) != 9 || tr.PromptTokens != 400 || tr.CompletionTokens != 40 {
		t.Errorf("transcript: %d messages, usage %d/%d", len(tr.Messages), tr.PromptTokens, tr.CompletionTokens)
	}
}

func TestRunLimitsAndFailures(t *testing.T) {
	tool := codemodetest.ShopTool(t)
	params := openai.ChatCompletionNewParams{Model: "gpt-test"}
	t.Run("max rounds", func(t *testing.T) {
		api := codemodetest.NewFakeAPI(t, "/chat/completions", func(n int, _ map[string]any) (int, any) {
			return 200, completion(n, "tool_calls", nil, call(fmt.Sprintf("call_%d", n), code("1 + 1")))
		})
		_, tr, err := openaitool.Run(context.Background(), newClient(api.URL), tool, params, question, 2)
		codemodetest.CheckMaxRounds(t, api, err, 2, len(tr.Steps))
	})
	t.Run("length", func(t *testing.T) {
		api := codemodetest.NewFakeAPI(t, "/chat/completions", func(n int, _ map[string]any) (int, any) {
			return 200, completion(n, "length", "The total is")
		})
		answer, _, err := openaitool.Run(context.Background(), newClient(api.URL), tool, params, question, 0)
		if !errors.Is(err, codemode.ErrNoAnswer) || answer != "The total is" {
			t.Errorf("Run = %q, %v; want the partial text and ErrNoAnswer", answer, err)
		}
	})
	t.Run("API error", func(t *testing.T) {
		api := codemodetest.NewFakeAPI(t, "/chat/completions", func(int, map[string]any) (int, any) {
			return 401, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": "bad key", "code": "invalid_api_key"}}
		})
		_, _, err := openaitool.Run(context.Background(), newClient(api.URL), tool, params, question, 0)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
			t.Errorf("err %v, want an *openai.Error with status 401", err)
		}
	})
	t.Run("unknown function", func(t *testing.T) {
		var c openai.ChatCompletionMessageToolCall
		c.ID, c.Function.Name, c.Function.Arguments = "call_x", "bash", `{"code":"ls"}`
		msg, out, err := openaitool.Handle(context.Background(), tool, c)
		if err != nil || !out.IsError || msg.OfTool == nil || msg.OfTool.ToolCallID != "call_x" {
			t.Errorf("Handle(bash) = %+v, %+v, %v", msg.OfTool, out, err)
		}
	})
}
