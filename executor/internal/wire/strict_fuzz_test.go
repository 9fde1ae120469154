package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzKeyScan compares keyScan with a walk of json.Decoder.Token (the
// way Strict found duplicate keys before): on every value encoding/json
// accepts, both refuse the same bodies.
//
//	go test -run '^$' -fuzz FuzzKeyScan -fuzztime 30s ./executor/internal/wire
func FuzzKeyScan(f *testing.F) {
	for _, s := range []string{
		`{"command":{"shell":"true"},"COMMAND":{}}`,
		`{"a":[{"b":1,"B":2}],"env":{"x":1,"X":2}}`,
		`{"env":{"x":1,"x":2}}`,
		`{"k\u0061":1,"ka":2}`,
		` [1, "a", {"s":null, "ſ":true}] `,
		`{"files":{"a":{"b":1,"b":2}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil || !json.Valid(data) {
			return
		}
		ks := keyScan{b: data}
		got := ks.value(false) == nil
		want := tokenWalk(json.NewDecoder(bytes.NewReader(data)), false) == nil
		if got != want {
			t.Fatalf("%q: keyScan ok=%v, the Token walk ok=%v", data, got, want)
		}
	})
}

// tokenWalk is the former duplicate-key check, kept as the fuzz oracle.
func tokenWalk(dec *json.Decoder, isMap bool) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('['):
		for dec.More() {
			if err := tokenWalk(dec, false); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			f := k
			if !isMap {
				f = foldSlow(k)
			}
			if seen[f] {
				return errKeyScan
			}
			seen[f] = true
			if err := tokenWalk(dec, !isMap && mapFields[strings.ToLower(k)]); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

// foldSlow is fold without its ASCII shortcut.
func foldSlow(s string) string {
	return fold("\u00e9" + s)[len("\u00c9"):]
}
