package clientwire

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
	gwire "github.com/gloveboxhq/glovebox/internal/wire"
)

// EncodeArgs is a tool call's arguments as they cross to the client: the
// two-element array [positional, keyword] in the glovebox value format
// (absent parts as [] and {}). An argument with no data form (it cannot
// come from a guest) raises ArgumentError in the guest, naming the tool.
func EncodeArgs(name string, a glovebox.Args) ([]byte, error) {
	pos, kw := a.Positional, a.Keyword
	if pos == nil {
		pos = []any{}
	}
	if kw == nil {
		kw = map[string]any{}
	}
	args, err := gwire.Encode(nil, []any{pos, kw}, gwire.MaxDepth)
	if err != nil {
		return nil, &engine.GuestError{Class: "ArgumentError", Message: fmt.Sprintf("%s: %v", name, err)}
	}
	return args, nil
}

var classRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9_]{0,63}$`)

// DecodeReply turns a client's tool-answer frame into what a relaying
// tool returns to the guest: "n", "t", "f", "s\n<string>",
// "i\n<integer>" (exact at any size), "j\n<value>" give a value;
// "err\n<Class>\n<message>" raises that class (a constant name of at
// most 64 bytes); "abort\n<status>\n<message>" ends the eval with
// tool_budget_exceeded or timeout. Anything else raises
// Glovebox::ToolError ("the client sent a malformed tool answer"): a
// malformed frame never reaches the guest as data.
func DecodeReply(rep string) (any, error) {
	bad := &engine.GuestError{Class: "ToolError", Message: "the client sent a malformed tool answer"}
	head, rest, _ := strings.Cut(rep, "\n")
	switch head {
	case "n":
		if rep == "n" {
			return nil, nil
		}
	case "t", "f":
		if len(rep) == 1 {
			return rep == "t", nil
		}
	case "s":
		return rest, nil
	case "i":
		if n, err := strconv.ParseInt(rest, 10, 64); err == nil {
			return n, nil
		}
		if len(rest) <= gwire.MaxIntDigits+1 {
			if b, ok := new(big.Int).SetString(rest, 10); ok {
				return b, nil
			}
		}
	case "j":
		v, err := gwire.Decode([]byte(rest))
		if err == nil {
			return v, nil
		}
	case "err":
		class, msg, ok := strings.Cut(rest, "\n")
		if ok && classRE.MatchString(class) {
			return nil, &engine.GuestError{Class: class, Message: msg}
		}
	case "abort":
		status, msg, ok := strings.Cut(rest, "\n")
		if ok && (status == string(engine.StatusToolBudgetExceeded) || status == string(engine.StatusTimeout)) {
			return nil, &engine.Abort{Status: engine.Status(status), Message: msg}
		}
	}
	return nil, bad
}

// Answer is the glovebox.Answer a reply frame gives a paused call: its
// value, or an error the guest can rescue (err frames keep their
// class). An abort frame is not an answer: it is an error here too.
func Answer(rep string) glovebox.Answer {
	v, err := DecodeReply(rep)
	var a glovebox.Answer
	if ge, ok := err.(*engine.GuestError); ok {
		a.Err = &glovebox.ToolError{Class: ge.Class, Message: ge.Message}
	} else if err != nil {
		a.Err = err
	}
	a.Value = v
	return a
}
