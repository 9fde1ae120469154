package codemode

import "github.com/gloveboxhq/glovebox"

// DescribeSandbox exposes describe to the golden tests, which need mounts
// and limits that a test Runtime cannot have.
func DescribeSandbox(name string, session bool, tools []glovebox.ToolDoc, mounts []glovebox.Mount,
	limits glovebox.Limits, memoryFloor int64, maxOutput int, instructions string) string {
	return describe(sandbox{name: name, session: session, tools: tools, mounts: mounts, limits: limits,
		memoryFloor: memoryFloor, maxOutput: maxOutput, instructions: instructions})
}

// Fit exposes the output budget for its tests.
func Fit(res *glovebox.Result, session bool, limit int) []byte {
	return encodeResult(res, session, limit)
}
