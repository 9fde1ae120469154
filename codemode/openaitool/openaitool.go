// Package openaitool connects a [codemode.Tool] to OpenAI's Chat
// Completions API through the official Go SDK, github.com/openai/openai-go
// (v1).
//
//	client := openai.NewClient() // reads OPENAI_API_KEY
//	tool, _ := codemode.New(codemode.Config{Runtime: rt})
//	answer, tr, err := openaitool.Run(ctx, client, tool, openai.ChatCompletionNewParams{
//		Model: openai.ChatModelGPT4_1,
//	}, "What did I spend on shipped orders this year?", 5)
//
// [Tool] is the tool definition, [Handle] turns one tool call into its
// tool message, and [Run] is a small agent loop over both.
//
// # Why Chat Completions
//
// OpenAI now recommends its Responses API for new work, and the SDK has
// both. This adapter speaks Chat Completions because it is the wire
// format every OpenAI-compatible server implements (Azure OpenAI, vLLM,
// Ollama, llama.cpp, gateways such as OpenRouter), it keeps no state on
// the server, and one tool with one string argument needs nothing the
// Responses API adds. The price: a tool message has no error flag, so a
// failure is marked only by the result JSON's status, which the tool's
// description explains to the model.
package openaitool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go"

	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/internal/agent"
)

// Tool returns t's definition for ChatCompletionNewParams.Tools: a
// function with t's name, description and input schema ({"code":
// string}, required, no other properties).
func Tool(t *codemode.Tool) openai.ChatCompletionToolParam {
	var params openai.FunctionParameters
	// InputSchema is a fixed, valid object; its decoding cannot fail.
	_ = json.Unmarshal(t.InputSchema(), &params)
	return openai.ChatCompletionToolParam{Function: openai.FunctionDefinitionParam{
		Name:        t.Name(),
		Description: openai.String(t.Description()),
		Parameters:  params,
	}}
}

// Handle runs the program in one tool call and returns the tool message
// to append to the conversation, its content the result JSON. Chat
// Completions has no error flag for tool messages: the JSON's status says
// whether the program failed, and the Outcome's IsError says it to Go. A
// call to another function name, or arguments without code, is answered
// with an invalid_input result the model can read. The error is set only
// for host-side failures (see [codemode.Tool.Handle]); the Outcome is nil
// then.
func Handle(ctx context.Context, t *codemode.Tool, call openai.ChatCompletionMessageToolCall) (openai.ChatCompletionMessageParamUnion, *codemode.Outcome, error) {
	out, err := t.HandleCall(ctx, call.Function.Name, json.RawMessage(call.Function.Arguments))
	if err != nil {
		return openai.ChatCompletionMessageParamUnion{}, nil, err
	}
	return openai.ToolMessage(string(out.Output), call.ID), out, nil
}

// Transcript is what a [Run] did.
type Transcript struct {
	// Messages is the conversation as the API saw it: the messages of the
	// params passed to Run, the question, then each assistant message
	// and the tool messages answering it. After ErrMaxRounds it ends with
	// the model's unanswered tool calls.
	Messages []openai.ChatCompletionMessageParamUnion
	// Steps are the tool calls run, in order.
	Steps []codemode.Step
	// PromptTokens and CompletionTokens add up the usage the API reported.
	PromptTokens, CompletionTokens int64
}

// Run asks the model question and runs its tool calls through t until it
// answers, returning the content of its final message. params supplies
// the model and any earlier messages (a system message among them); Run
// adds t's definition to params.Tools (unless a function of that name is
// there) and question as a new user message (unless question is empty).
// Only the first choice is used.
//
// maxRounds is the most assistant messages with tool calls that Run
// executes (zero means codemode.DefaultMaxRounds), so the model is asked
// at most maxRounds+1 times. Errors: [codemode.ErrInvalidConfig] for a
// negative maxRounds, [codemode.ErrMaxRounds] when the model still calls
// tools after that, [codemode.ErrNoAnswer] when it stops otherwise without
// an answer (finish reasons length or content_filter, a refusal, an empty
// reply, no choices), the SDK's error (an *openai.Error for API errors)
// when a request fails, and a host-side glovebox failure from [Handle].
// The transcript so far comes with every error after the first request.
func Run(ctx context.Context, client openai.Client, t *codemode.Tool, params openai.ChatCompletionNewParams, question string, maxRounds int) (string, *Transcript, error) {
	maxRounds, err := agent.MaxRounds(maxRounds)
	if err != nil {
		return "", nil, err
	}
	if !hasTool(params.Tools, t.Name()) {
		params.Tools = append(append([]openai.ChatCompletionToolParam(nil), params.Tools...), Tool(t))
	}
	msgs := append([]openai.ChatCompletionMessageParamUnion(nil), params.Messages...)
	if question != "" {
		msgs = append(msgs, openai.UserMessage(question))
	}
	tr := &Transcript{}
	for round := 1; ; round++ {
		params.Messages = msgs
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			tr.Messages = msgs
			return "", tr, fmt.Errorf("openaitool: request %d: %w", round, err)
		}
		tr.PromptTokens += resp.Usage.PromptTokens
		tr.CompletionTokens += resp.Usage.CompletionTokens
		if len(resp.Choices) == 0 {
			tr.Messages = msgs
			return "", tr, fmt.Errorf("%w: the response has no choices", codemode.ErrNoAnswer)
		}
		choice := resp.Choices[0]
		msg := choice.Message
		msgs = append(msgs, msg.ToParam())
		tr.Messages = msgs
		if len(msg.ToolCalls) == 0 {
			switch {
			case msg.Refusal != "":
				return "", tr, fmt.Errorf("%w: the model refused: %s", codemode.ErrNoAnswer, msg.Refusal)
			case choice.FinishReason != "stop":
				return msg.Content, tr, fmt.Errorf("%w: finish reason %s", codemode.ErrNoAnswer, choice.FinishReason)
			case strings.TrimSpace(msg.Content) == "":
				return "", tr, fmt.Errorf("%w: the reply is empty", codemode.ErrNoAnswer)
			}
			return msg.Content, tr, nil
		}
		if round > maxRounds {
			return msg.Content, tr, fmt.Errorf("%w: the model called tools again after %d rounds", codemode.ErrMaxRounds, maxRounds)
		}
		for _, call := range msg.ToolCalls {
			reply, out, err := Handle(ctx, t, call)
			if err != nil {
				return "", tr, fmt.Errorf("openaitool: round %d: %w", round, err)
			}
			msgs = append(msgs, reply)
			tr.Steps = append(tr.Steps, codemode.Step{Round: round, ID: call.ID, Name: call.Function.Name,
				Input: json.RawMessage(call.Function.Arguments), Outcome: out})
		}
		tr.Messages = msgs
	}
}

func hasTool(tools []openai.ChatCompletionToolParam, name string) bool {
	for _, u := range tools {
		if u.Function.Name == name {
			return true
		}
	}
	return false
}
