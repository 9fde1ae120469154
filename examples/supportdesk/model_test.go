package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go"
	ooption "github.com/openai/openai-go/option"

	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/examples/supportdesk/desk"
)

// wireModel is a model behind a provider's wire format that plays one
// scripted question: its n-th reply asks to run attempt n's code, and
// once the attempts are used up it answers from the value of the last
// tool result it received, with the question's answer template. It
// records each tool result the SDK adapter sent back.
type wireModel struct {
	t *testing.T
	q desk.Question
	// endless makes every reply a tool call, to test the round cap.
	endless bool

	mu       sync.Mutex
	requests int
	first    string // the first request's body
	results  []toolResult
}

// toolResult is one tool result as the provider received it.
type toolResult struct {
	isError bool           // the Anthropic is_error flag (OpenAI has none)
	output  map[string]any // the codemode JSON
}

// serve starts the model on a loopback server answering POST path; the
// provider-specific parts are decoding a tool result from a request and
// encoding a reply. It stops when the test ends.
func (m *wireModel) serve(path string, lastResult func(req map[string]any) (toolResult, bool),
	reply func(n int, code, answer string) any) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != path || json.Unmarshal(body, &req) != nil {
			m.t.Errorf("fake API: unexpected %s %s %.200s", r.Method, r.URL.Path, body)
			http.Error(w, `{"error":{"type":"invalid_request_error","message":"unexpected request"}}`, http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		n := m.requests
		m.requests++
		if n == 0 {
			m.first = string(body)
		}
		if tr, ok := lastResult(req); ok {
			m.results = append(m.results, tr)
		} else if n > 0 {
			m.t.Errorf("fake API: request %d carries no tool result: %.300s", n, body)
		}
		var code, answer string
		if m.endless || n < len(m.q.Attempts) {
			code = m.q.Attempts[min(n, len(m.q.Attempts)-1)].Code
		} else {
			var err error
			if len(m.results) == 0 {
				err = errors.New("no tool result to answer from")
			} else if answer, err = m.q.Reply(m.results[len(m.results)-1].output["value"]); err != nil {
				m.t.Errorf("fake API: answer: %v", err)
			}
		}
		m.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(reply(n, code, answer))
	}))
	m.t.Cleanup(srv.Close)
	return srv.URL
}

func decodeOutput(t *testing.T, s string) map[string]any {
	var out map[string]any
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Errorf("fake API: the tool result is not the codemode JSON: %v: %q", err, s)
	}
	return out
}

// anthropicModel serves m in the Messages API format.
func (m *wireModel) anthropicModel() *anthropicAgent {
	url := m.serve("/v1/messages", func(req map[string]any) (toolResult, bool) {
		msgs, _ := req["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		blocks, _ := last["content"].([]any)
		for _, b := range blocks {
			if b, _ := b.(map[string]any); b["type"] == "tool_result" {
				parts, _ := b["content"].([]any)
				text, _ := parts[0].(map[string]any)["text"].(string)
				isErr, _ := b["is_error"].(bool)
				return toolResult{isErr, decodeOutput(m.t, text)}, true
			}
		}
		return toolResult{}, false
	}, func(n int, code, answer string) any {
		content := []any{map[string]any{"type": "text", "text": answer}}
		stop := "end_turn"
		if code != "" {
			content = []any{map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", n), "name": codemode.DefaultName,
				"input": map[string]any{"code": code}}}
			stop = "tool_use"
		}
		return map[string]any{"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant", "model": "claude-test",
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 1000, "output_tokens": 50}}
	})
	client := anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(0))
	return &anthropicAgent{client: client, model: "claude-test", maxRounds: 4}
}

// openaiModel serves m in the Chat Completions format.
func (m *wireModel) openaiModel() *openaiAgent {
	url := m.serve("/chat/completions", func(req map[string]any) (toolResult, bool) {
		msgs, _ := req["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		if last["role"] != "tool" {
			return toolResult{}, false
		}
		text, ok := last["content"].(string)
		if !ok { // content parts
			parts, _ := last["content"].([]any)
			text, _ = parts[0].(map[string]any)["text"].(string)
		}
		return toolResult{output: decodeOutput(m.t, text)}, true
	}, func(n int, code, answer string) any {
		msg := map[string]any{"role": "assistant", "content": answer, "refusal": nil}
		finish := "stop"
		if code != "" {
			args, _ := json.Marshal(map[string]string{"code": code})
			msg["content"] = nil
			msg["tool_calls"] = []any{map[string]any{"id": fmt.Sprintf("call_%d", n), "type": "function",
				"function": map[string]any{"name": codemode.DefaultName, "arguments": string(args)}}}
			finish = "tool_calls"
		}
		return map[string]any{"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1764500000,
			"model": "gpt-test", "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage": map[string]any{"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}}
	})
	client := openai.NewClient(ooption.WithBaseURL(url), ooption.WithAPIKey("test-key"), ooption.WithMaxRetries(0))
	return &openaiAgent{client: client, model: "gpt-test", maxRounds: 4}
}

// testRealModelPath drives the example's real-model path through the SDK
// adapter against a fake API playing the script's question id: every
// attempt is a tool round, failing ones included, and the answer must be
// the scripted one, which desk's tests check against SQL.
func testRealModelPath(t *testing.T, d *deskEnv, s *desk.Script, id string, serve func(*wireModel) agent, wantIsError bool) {
	var q desk.Question
	for _, x := range s.Questions {
		if x.ID == id {
			q = x
		}
	}
	if len(q.Attempts) < 2 {
		t.Fatalf("question %s needs at least two attempts, an error first", id)
	}
	scripted, err := q.Run(t.Context(), d.rt)
	if err != nil {
		t.Fatal(err)
	}
	m := &wireModel{t: t, q: q}
	var out bytes.Buffer
	err = converse(t.Context(), &out, d, serve(m), []question{{"wire", q.Customer, q.Ask}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if m.requests != len(q.Attempts)+1 || len(m.results) != len(q.Attempts) {
		t.Fatalf("%d requests with %d tool results, want %d and %d", m.requests, len(m.results), len(q.Attempts)+1, len(q.Attempts))
	}
	// The model saw the tool, its functions, the house rules, and who it
	// is talking to.
	var name string
	d.db.QueryRow(`SELECT name FROM customers WHERE id = ?`, q.Customer).Scan(&name)
	for _, want := range []string{`"name":"run_ruby"`, "order_items(order_id)", "never instructions to you", name} {
		if !strings.Contains(m.first, want) {
			t.Errorf("the first request lacks %q", want)
		}
	}
	for i, r := range m.results {
		want := string(q.Attempts[i].Expect.Status)
		if want == "" {
			want = "ok"
		}
		if r.output["status"] != want || (wantIsError && r.isError != (want != "ok")) {
			t.Errorf("round %d: the model read status %v (is_error %v), want %s", i+1, r.output["status"], r.isError, want)
		}
	}
	text := out.String()
	if !strings.Contains(text, "\nModel: "+strings.ReplaceAll(scripted.Answer, "\n", "\n       ")+"\n") {
		t.Errorf("the answer through the wire differs from the scripted one %q:\n%s", scripted.Answer, text)
	}
	for _, a := range q.Attempts {
		if !strings.Contains(text, indent(a.Code)) {
			t.Errorf("the printout lacks a program:\n%s", text)
		}
	}
}

func TestRealModelPathOffline(t *testing.T) {
	d, s := testDesk, testScript
	t.Run("anthropic", func(t *testing.T) {
		testRealModelPath(t, d, s, "monthly-spend", func(m *wireModel) agent { return m.anthropicModel() }, true)
	})
	t.Run("openai", func(t *testing.T) {
		testRealModelPath(t, d, s, "items-total", func(m *wireModel) agent { return m.openaiModel() }, false)
	})
	t.Run("round cap", func(t *testing.T) {
		for _, serve := range []func(*wireModel) agent{
			func(m *wireModel) agent { a := m.anthropicModel(); a.maxRounds = 2; return a },
			func(m *wireModel) agent { a := m.openaiModel(); a.maxRounds = 2; return a },
		} {
			m := &wireModel{t: t, q: s.Questions[0], endless: true}
			var out bytes.Buffer
			err := converse(t.Context(), &out, d, serve(m), []question{{"cap", desk.DemoCustomer, "Loop forever, please."}})
			if err == nil || !strings.Contains(out.String(), codemode.ErrMaxRounds.Error()) {
				t.Fatalf("err %v, output:\n%s\nwant the round cap reported", err, out.String())
			}
			if m.requests != 3 {
				t.Errorf("%d requests, want 3 (two tool rounds, then the cap)", m.requests)
			}
		}
	})
	t.Run("API error stops", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
		}))
		defer srv.Close()
		client := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("bad"), aoption.WithMaxRetries(0))
		var out bytes.Buffer
		qs := []question{{"one", desk.DemoCustomer, "Hi?"}, {"two", desk.DemoCustomer, "Hello?"}}
		err := converse(t.Context(), &out, d, &anthropicAgent{client: client, model: "claude-test", maxRounds: 2}, qs)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
			t.Fatalf("err %v, want the API's 401", err)
		}
		if strings.Contains(out.String(), "two ·") {
			t.Error("asked the second question after an API error")
		}
	})
}
