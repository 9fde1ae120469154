// Package anthropictool connects a [codemode.Tool] to the Anthropic
// Messages API through the official Go SDK,
// github.com/anthropics/anthropic-sdk-go (v1).
//
//	client := anthropic.NewClient() // reads ANTHROPIC_API_KEY
//	tool, _ := codemode.New(codemode.Config{Runtime: rt})
//	answer, tr, err := anthropictool.Run(ctx, client, tool, anthropic.MessageNewParams{
//		Model:     anthropic.ModelClaudeSonnet4_5,
//		MaxTokens: 2048,
//	}, "What did I spend on shipped orders this year?", 5)
//
// [Tool] is the tool definition, [Handle] turns one tool_use block into
// its tool_result block (is_error set for every status but ok), and [Run]
// is a small agent loop over both.
package anthropictool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/internal/agent"
)

// Tool returns t's definition for MessageNewParams.Tools: its name,
// description and input schema ({"code": string}, required, no other
// properties).
func Tool(t *codemode.Tool) anthropic.ToolUnionParam {
	var schema struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	// InputSchema is a fixed, valid object; its decoding cannot fail.
	_ = json.Unmarshal(t.InputSchema(), &schema)
	return anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name:        t.Name(),
		Description: anthropic.String(t.Description()),
		InputSchema: anthropic.ToolInputSchemaParam{
			Properties:  schema.Properties,
			Required:    schema.Required,
			ExtraFields: map[string]any{"additionalProperties": false},
		},
	}}
}

// Handle runs the program in a tool_use block and returns the tool_result
// block to send back in the next user message: the result JSON as its
// text, is_error set for every status but ok. A call to another tool name,
// or input without code, is answered with an invalid_input result the
// model can read. The error is set only for host-side failures (see
// [codemode.Tool.Handle]); the Outcome is nil then.
func Handle(ctx context.Context, t *codemode.Tool, block anthropic.ToolUseBlock) (anthropic.ContentBlockParamUnion, *codemode.Outcome, error) {
	out, err := t.HandleCall(ctx, block.Name, block.Input)
	if err != nil {
		return anthropic.ContentBlockParamUnion{}, nil, err
	}
	return anthropic.NewToolResultBlock(block.ID, string(out.Output), out.IsError), out, nil
}

// Transcript is what a [Run] did.
type Transcript struct {
	// Messages is the conversation as the API saw it: the messages of the
	// params passed to Run, the question, then each model turn and the
	// tool results sent after it. After ErrMaxRounds it ends with the
	// model's unanswered tool_use turn.
	Messages []anthropic.MessageParam
	// Steps are the tool calls run, in order.
	Steps []codemode.Step
	// InputTokens and OutputTokens add up the usage the API reported.
	InputTokens, OutputTokens int64
}

// Run asks the model question and runs its tool calls through t until it
// answers, returning the text of its final turn. params supplies the
// model, max_tokens, system prompt and any earlier messages; Run adds t's
// definition to params.Tools (unless a tool of that name is there) and
// question as a new user message (unless question is empty).
//
// maxRounds is the most model turns asking for tools that Run executes
// (zero means codemode.DefaultMaxRounds), so the model is asked at most
// maxRounds+1 times. Errors: [codemode.ErrInvalidConfig] for a negative
// maxRounds, [codemode.ErrMaxRounds] when the model still wants tools
// after that, [codemode.ErrNoAnswer] when it stops otherwise without an
// answer (stop reasons max_tokens, refusal, an empty reply), the SDK's
// error (an *anthropic.Error for API errors) when a request fails, and a
// host-side glovebox failure from [Handle]. The transcript so far comes
// with every error after the first request.
func Run(ctx context.Context, client anthropic.Client, t *codemode.Tool, params anthropic.MessageNewParams, question string, maxRounds int) (string, *Transcript, error) {
	maxRounds, err := agent.MaxRounds(maxRounds)
	if err != nil {
		return "", nil, err
	}
	if !hasTool(params.Tools, t.Name()) {
		params.Tools = append(append([]anthropic.ToolUnionParam(nil), params.Tools...), Tool(t))
	}
	msgs := append([]anthropic.MessageParam(nil), params.Messages...)
	if question != "" {
		msgs = append(msgs, anthropic.NewUserMessage(anthropic.NewTextBlock(question)))
	}
	tr := &Transcript{}
	for round := 1; ; round++ {
		params.Messages = msgs
		msg, err := client.Messages.New(ctx, params)
		if err != nil {
			tr.Messages = msgs
			return "", tr, fmt.Errorf("anthropictool: request %d: %w", round, err)
		}
		tr.InputTokens += msg.Usage.InputTokens
		tr.OutputTokens += msg.Usage.OutputTokens
		msgs = append(msgs, msg.ToParam())
		tr.Messages = msgs
		text, uses := split(msg)
		if len(uses) == 0 {
			switch msg.StopReason {
			case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
				if strings.TrimSpace(text) == "" {
					return "", tr, fmt.Errorf("%w: the reply is empty (stop reason %s)", codemode.ErrNoAnswer, msg.StopReason)
				}
				return text, tr, nil
			case anthropic.StopReasonPauseTurn:
				// The API paused a long turn; sending the conversation
				// back lets it continue. It counts as a round.
				if round > maxRounds {
					return text, tr, fmt.Errorf("%w: %d rounds, the last one paused", codemode.ErrMaxRounds, maxRounds)
				}
				continue
			}
			return text, tr, fmt.Errorf("%w: stop reason %s", codemode.ErrNoAnswer, msg.StopReason)
		}
		if round > maxRounds {
			return text, tr, fmt.Errorf("%w: the model asked for tools again after %d rounds", codemode.ErrMaxRounds, maxRounds)
		}
		results := make([]anthropic.ContentBlockParamUnion, 0, len(uses))
		for _, u := range uses {
			block, out, err := Handle(ctx, t, u)
			if err != nil {
				return "", tr, fmt.Errorf("anthropictool: round %d: %w", round, err)
			}
			results = append(results, block)
			tr.Steps = append(tr.Steps, codemode.Step{Round: round, ID: u.ID, Name: u.Name, Input: u.Input, Outcome: out})
		}
		msgs = append(msgs, anthropic.NewUserMessage(results...))
		tr.Messages = msgs
	}
}

// split returns a message's text and its tool_use blocks.
func split(msg *anthropic.Message) (string, []anthropic.ToolUseBlock) {
	var text strings.Builder
	var uses []anthropic.ToolUseBlock
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			uses = append(uses, b.AsToolUse())
		}
	}
	return text.String(), uses
}

func hasTool(tools []anthropic.ToolUnionParam, name string) bool {
	for _, u := range tools {
		if u.OfTool != nil && u.OfTool.Name == name {
			return true
		}
	}
	return false
}
