package glovebox

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/wire"
)

type benchOpts struct {
	Path  string           `json:"path"`
	Limit int              `json:"limit,omitempty"`
	Tags  []string         `json:"tags,omitempty"`
	Meta  map[string]any   `json:"meta,omitempty"`
	Rows  []map[string]any `json:"rows,omitempty"`
}

// BenchmarkConvertArg measures filling an options bag from guest data
// directly, next to the JSON round trip the conversion used before
// (encode, then encoding/json decode) as the baseline.
func BenchmarkConvertArg(b *testing.B) {
	x := map[string]any{"path": "/data/x", "limit": int64(50), "tags": []any{"a", "b"},
		"meta": map[string]any{"n": int64(5), "f": 1.5},
		"rows": []any{map[string]any{"id": int64(1)}, map[string]any{"id": int64(2)}}}
	t := reflect.TypeFor[benchOpts]()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := convertArg(x, t, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json_baseline", func(b *testing.B) {
		for b.Loop() {
			buf, err := wire.EncodeJSON(nil, x, wire.MaxDepth)
			if err != nil {
				b.Fatal(err)
			}
			var o benchOpts
			if err := json.Unmarshal(buf, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
