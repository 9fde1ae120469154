package codemode

import (
	"encoding/json"
	"fmt"

	"github.com/gloveboxhq/glovebox"
)

// Spec describes a sandbox whose tools live in another process (a
// client of the executor in another language): what [New] reads from a
// Runtime, given as data, so that [Describe] and [Encode] make the same
// description and results as a [Tool] would.
type Spec struct {
	// Name is the tool's name ([Config].Name's rule); "" is DefaultName.
	Name string
	// Session says calls share one VM ([Config].Session).
	Session bool
	// Tools document the guest functions, in the order described.
	Tools []glovebox.ToolDoc
	// Limits are those evals run with, defaults filled in (zero fields
	// are described as zero: fill them first).
	Limits glovebox.Limits
	// MemoryFloor is the bytes the booted guest occupies
	// ([glovebox.Runtime.MemoryFloor]); 0 states the memory limit with
	// Ruby included.
	MemoryFloor int64
	// Instructions, MaxOutput and Servers are as in [Config].
	Instructions string
	MaxOutput    int
	Servers      []Server
	// Mounts are the guest's directories (only GuestPath, Writable and
	// Description are read), described under "Files".
	Mounts []glovebox.Mount
}

// Describe returns the tool's name and its model-facing description for
// s, as [New] makes them for a Runtime with those tools and limits.
// Errors wrap [ErrInvalidConfig]: a bad name or MaxOutput, a tool
// without a name or with a name glovebox refuses.
func Describe(s Spec) (name, description string, err error) {
	name, err = checkName(s.Name)
	if err != nil {
		return "", "", err
	}
	maxOut, err := checkMaxOutput(s.MaxOutput)
	if err != nil {
		return "", "", err
	}
	for _, d := range s.Tools {
		if err := glovebox.ValidToolName(d.Name); err != nil {
			return "", "", fmt.Errorf("%w: tool %q: %v", ErrInvalidConfig, d.Name, err)
		}
	}
	sb := sandbox{name: name, session: s.Session, tools: s.Tools, limits: s.Limits, memoryFloor: s.MemoryFloor,
		maxOutput: maxOut, instructions: s.Instructions, servers: s.Servers, mounts: s.Mounts}
	return name, describe(sb), nil
}

// Encode returns the JSON object a model receives for res, as
// [Tool.Run] makes it for a Tool with that Session and MaxOutput
// (0: DefaultMaxOutput). Errors wrap [ErrInvalidConfig] for a bad
// MaxOutput; res must not be nil.
func Encode(res *glovebox.Result, session bool, maxOutput int) (json.RawMessage, error) {
	maxOut, err := checkMaxOutput(maxOutput)
	if err != nil {
		return nil, err
	}
	return encodeResult(res, session, maxOut), nil
}

// InputSchema is every Tool's input schema ([Tool.InputSchema]): an
// object with one required string property, code.
func InputSchema() json.RawMessage { return (&Tool{}).InputSchema() }
