package codemode_test

import (
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

type searchOpts struct {
	Query      string `json:"query" jsonschema:"required"`
	MaxResults int    `json:"max_results,omitempty"`
	DryRun     bool   `json:"dry_run"`
}

type pageOpts struct {
	PageSize int `json:"page_size"`
}

// An options bag's description marks only the fields a call fails
// without as required, and its example uses the JSON names the guest
// must type (keywords match exactly).
func TestOptionsBagDescription(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.Func("search", func(o searchOpts) int { return 0 }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Func("pages", func(o *pageOpts) int { return 0 }); err != nil {
		t.Fatal(err)
	}
	rt, err := glovebox.New(t.Context(), glovebox.Config{Tools: &ts})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	desc := mustTool(t, codemode.Config{Runtime: rt}).Description()
	for _, want := range []string{
		`"required":["query"]}; optional; may be passed as keyword arguments`,
		"Example: search(query: \"text\")\n",
		"Example: pages(page_size: 1)\n",
	} {
		if !strings.Contains(desc, want) {
			t.Errorf("description lacks %q:\n%s", want, desc)
		}
	}
	if strings.Contains(desc, "PageSize") || strings.Contains(desc, `"required":["page_size"]`) {
		t.Errorf("description names a Go field or requires an optional one:\n%s", desc)
	}
}
