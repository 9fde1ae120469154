package main

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/gloveboxhq/glovebox"
)

// callArgs writes a tool call's arguments as the guest passed them: the
// positional ones as JSON, then each keyword as name: JSON, sorted by
// name; "" when there are none (the transcript JSON writes [] and {}).
func callArgs(a glovebox.Args) string {
	var parts []string
	for _, x := range a.Positional {
		b, _ := json.Marshal(x)
		parts = append(parts, string(b))
	}
	names := make([]string, 0, len(a.Keyword))
	for k := range a.Keyword {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b, _ := json.Marshal(a.Keyword[k])
		parts = append(parts, k+": "+string(b))
	}
	return strings.Join(parts, ", ")
}
