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

// Libraries are the libraries the description names: those it says
// load, and those it says do not.
func Libraries() (load, fail []string) {
	return guestLibraries, append(append([]string{}, missingLibraries...), unreachableLibraries...)
}
