package wire

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeRequest: any body either decodes to a request that
// re-encodes and decodes to the same hash, or is refused with a
// documented code; the decoder never panics, and an error never quotes a
// credential value.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"command":{"argv":["true"]}}`,
		`{"idempotency_key":"k-1","expires_at":"2030-01-01T00:00:00Z","command":{"shell":"echo hi","files":{"a/b.txt":"aGk="},"env":{"A":"1"},"network":{"allow":["example.com"]},"timeout_ms":1000,"limits":{"memory":1048576,"output":10}},"credentials":{"TOK":"secret-canary"}}`,
		`{"command":{"argv":[""]}}`,
		`{"command":{"files":{"../x":""},"argv":["x"]}}`,
		`{"command":{"argv":["x"]}} {}`,
		`{"command":{"argv":["x"]},"credentials":{"A=B":"secret-canary"}}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRunRequest(data)
		if err != nil {
			e, ok := err.(*Error)
			if !ok || (e.Code != CodeBadRequest && e.Code != CodeInvalidCommand) {
				t.Fatalf("undocumented error %T %v", err, err)
			}
			if strings.Contains(e.Message, "secret-canary") {
				t.Fatalf("error quotes a credential: %v", e)
			}
			return
		}
		if r.IdempotencyKey != "" && !ValidKey(r.IdempotencyKey) {
			t.Fatalf("bad key accepted: %q", r.IdempotencyKey)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeRunRequest(again)
		if err != nil {
			t.Fatalf("re-encoded request refused: %v\n%s", err, again)
		}
		if Hash(&r.Command) != Hash(&r2.Command) {
			t.Fatalf("hash changed over a round trip:\n%s", again)
		}
	})
}

func TestHashExcludesCredentialsAndExpiry(t *testing.T) {
	a, _ := DecodeRunRequest([]byte(`{"command":{"argv":["x"]},"credentials":{"T":"one"}}`))
	now := time.Now()
	b := &RunRequest{Command: a.Command, Credentials: map[string]string{"T": "two"}, ExpiresAt: &now}
	if Hash(&a.Command) != Hash(&b.Command) || DeriveKey(&a.Command) != DeriveKey(&b.Command) || !ValidKey(DeriveKey(&a.Command)) {
		t.Error("credentials or expiry changed the hash")
	}
	c, _ := DecodeRunRequest([]byte(`{"command":{"argv":["y"]}}`))
	if Hash(&a.Command) == Hash(&c.Command) {
		t.Error("different commands share a hash")
	}
}

// TestNameChecksMatchTheirPatterns: the hand-written checks of keys,
// session IDs and tool names accept exactly what the documented patterns
// (EXECUTOR.md) accept.
func TestNameChecksMatchTheirPatterns(t *testing.T) {
	k := regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	s := regexp.MustCompile(`^s-[0-9a-f]{32}$`)
	n := regexp.MustCompile(`^[a-z_][A-Za-z0-9_]{0,127}[?!]?$`)
	in := []string{"", "a", "A", "_", "a?", "a!", "?", "a??", "a-b", "a.b:c", "s-" + strings.Repeat("a", 32), "s-" + strings.Repeat("A", 32), "s-" + strings.Repeat("0", 31), strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("a", 128) + "?", strings.Repeat("a", 129) + "?", "é", "a\n", "9a", "aB9_!"}
	for _, x := range in {
		if k.MatchString(x) != ValidKey(x) {
			t.Errorf("key %q", x)
		}
		if s.MatchString(x) != ValidSessionID(x) {
			t.Errorf("sid %q", x)
		}
		if n.MatchString(x) != validToolName(x) {
			t.Errorf("tool %q", x)
		}
	}
}
