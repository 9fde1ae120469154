package embed

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

// A pause token is continued only as it was made, under the state key
// it was made with: its meta travels in the clear, and the suspend list
// and the session it names are in no sealed state, so a token whose
// suspend list was emptied would run the later calls of a tool that
// should pause without asking (the attack this test reproduces).
func TestPauseTokenRefusesEditsCutsAndOtherKeys(t *testing.T) {
	key := tokenMACKey(bytes.Repeat([]byte{0x5a}, 32))
	meta := &pauseMeta{Config: sandboxConfig{Tools: []string{"change_plan", "orders"}}, Suspend: []string{"change_plan"}}
	state := []byte("sealed state bytes")
	tok := pauseToken(key, meta, state)

	got, st, rf := parseToken(key, tok)
	if rf != nil || !bytes.Equal(st, state) || len(got.Suspend) != 1 || got.Suspend[0] != "change_plan" {
		t.Fatalf("a token as made: %+v %q %v", got, st, rf)
	}

	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, tokenPrefix))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.BigEndian.Uint32(raw)
	mb, rest := raw[4:4+n], raw[4+n:]
	// remake builds a token of the given meta JSON and tail (MAC and
	// state) by hand, as someone holding a token could.
	remake := func(metaJSON, tail []byte) string {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(metaJSON)))
		b = append(append(b, metaJSON...), tail...)
		return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	}
	edit := func(f func(m *pauseMeta)) []byte {
		var m pauseMeta
		if err := json.Unmarshal(mb, &m); err != nil {
			t.Fatal(err)
		}
		f(&m)
		b, _ := json.Marshal(&m)
		return b
	}
	flipped := bytes.Clone(rest)
	flipped[len(flipped)-1] ^= 1
	cases := map[string]string{
		"suspend emptied":       remake(edit(func(m *pauseMeta) { m.Suspend = nil }), rest),
		"another session":       remake(edit(func(m *pauseMeta) { m.Session = "s-00" }), rest),
		"a mount added":         remake(edit(func(m *pauseMeta) { m.Config.Mounts = []mountSpec{{Host: "/", Guest: "/host", Writable: true}} }), rest),
		"a limit raised":        remake(edit(func(m *pauseMeta) { m.Config.Limits.TimeoutMS = 3600000 }), rest),
		"a state byte":          remake(mb, flipped),
		"the state cut":         remake(mb, rest[:len(rest)-3]),
		"another key's MAC":     pauseToken(tokenMACKey(bytes.Repeat([]byte{0x6b}, 32)), meta, state),
		"another token's state": remake(mb, append(bytes.Clone(rest[:tokenMACSize]), "other sealed state"...)),
	}
	for name, bad := range cases {
		if _, _, rf := parseToken(key, bad); rf == nil || rf.Code != codeStateRefused {
			t.Errorf("%s: %v, want %s", name, rf, codeStateRefused)
		}
	}
	for name, bad := range map[string]string{
		"no prefix":             strings.TrimPrefix(tok, tokenPrefix),
		"not base64":            tokenPrefix + "!!!",
		"cut in its MAC":        remake(mb, rest[:tokenMACSize-1]),
		"a length past the end": tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xff, 0xff, 0xff, '{'}),
		"empty":                 "",
	} {
		if _, _, rf := parseToken(key, bad); rf == nil || rf.Code != codeNotFound {
			t.Errorf("%s: %v, want %s", name, rf, codeNotFound)
		}
	}
}
