package clientwire

import (
	"time"

	"github.com/gloveboxhq/glovebox/box"
)

// Command is box.Command's wire form: everything but the local functions
// (Credentials, Stream, Tools). Byte fields are base64 in JSON.
type Command struct {
	Argv      []string          `json:"argv,omitempty"`
	Shell     string            `json:"shell,omitempty"`
	Files     map[string][]byte `json:"files,omitempty"`
	Stdin     []byte            `json:"stdin,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Network   Network           `json:"network"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"` // 0: box.DefaultTimeout
	Limits    Limits            `json:"limits"`
}

// Network is box.Network.
type Network struct {
	Allow []string `json:"allow,omitempty"`
}

// Limits is box.Limits; zero fields take box's defaults.
type Limits struct {
	Memory      int64   `json:"memory,omitempty"` // bytes
	CPUs        float64 `json:"cpus,omitempty"`   // cores
	Pids        int     `json:"pids,omitempty"`
	Output      int     `json:"output,omitempty"` // bytes of stdout and of stderr each
	Disk        int64   `json:"disk,omitempty"`   // bytes
	OutputFiles int64   `json:"output_files,omitempty"`
}

// FromBox converts a box.Command (its local functions are dropped).
func FromBox(c *box.Command) Command {
	return Command{
		Argv: c.Argv, Shell: c.Shell, Files: c.Files, Stdin: c.Stdin, Env: c.Env,
		Network:   Network{Allow: c.Network.Allow},
		TimeoutMS: c.Timeout.Milliseconds(),
		Limits: Limits{Memory: c.Limits.Memory, CPUs: c.Limits.CPUs, Pids: c.Limits.Pids,
			Output: c.Limits.Output, Disk: c.Limits.Disk, OutputFiles: c.Limits.OutputFiles},
	}
}

// Box converts back to a box.Command without local functions.
func (c *Command) Box() box.Command {
	return box.Command{
		Argv: c.Argv, Shell: c.Shell, Files: c.Files, Stdin: c.Stdin, Env: c.Env,
		Network: box.Network{Allow: c.Network.Allow},
		Timeout: time.Duration(c.TimeoutMS) * time.Millisecond,
		Limits: box.Limits{Memory: c.Limits.Memory, CPUs: c.Limits.CPUs, Pids: c.Limits.Pids,
			Output: c.Limits.Output, Disk: c.Limits.Disk, OutputFiles: c.Limits.OutputFiles},
	}
}

// Result is box.Result's wire form (an executor record's result, the
// embedded child's run answer); stdout, stderr and outputs are bytes
// (base64) so nothing is lost to UTF-8 repair.
type Result struct {
	Stdout           []byte            `json:"stdout"`
	Stderr           []byte            `json:"stderr"`
	StdoutTruncated  bool              `json:"stdout_truncated,omitempty"`
	StderrTruncated  bool              `json:"stderr_truncated,omitempty"`
	ExitStatus       int               `json:"exit_status"`
	TimedOut         bool              `json:"timed_out,omitempty"`
	KilledForMemory  bool              `json:"killed_for_memory,omitempty"`
	Canceled         bool              `json:"canceled,omitempty"`
	KilledExternally bool              `json:"killed_externally,omitempty"` // box.Result.KilledExternally
	DurationMS       float64           `json:"duration_ms"`
	Isolation        string            `json:"isolation"`
	Outputs          map[string][]byte `json:"outputs,omitempty"`
	OutputsTruncated bool              `json:"outputs_truncated,omitempty"`
	Enforced         []string          `json:"enforced,omitempty"`
}

// FromBoxResult is res's wire form; isolation names the box that ran it
// (box.Posture.Isolation).
func FromBoxResult(res *box.Result, isolation box.Isolation) *Result {
	return &Result{
		Stdout: []byte(res.Stdout), Stderr: []byte(res.Stderr),
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		ExitStatus: res.ExitStatus, TimedOut: res.TimedOut, KilledForMemory: res.KilledForMemory, Canceled: res.Canceled,
		KilledExternally: res.KilledExternally,
		DurationMS:       float64(res.Duration.Microseconds()) / 1000, Isolation: string(isolation),
		Outputs: res.Outputs, OutputsTruncated: res.OutputsTruncated, Enforced: res.Enforced,
	}
}
