package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// FuzzDecodeEvalRequest: any body gives a request that keeps the
// documented bounds, or a bad_request *Error; an accepted request
// survives a round trip through JSON with the same hash.
func FuzzDecodeEvalRequest(f *testing.F) {
	for _, s := range []string{
		`{"code":"1+1"}`,
		`{"idempotency_key":"e-1","expires_at":"2030-01-01T00:00:00Z","code":"add(1,2)","tools":["add","lookup?"],"limits":{"timeout_ms":1000,"fuel":5,"memory":1,"stdout":2,"stderr":3,"value":4,"tool_payload":5,"file_write":6,"file_creates":7},"stdin":"aGk=","args":["a","b"]}`,
		`{"code":"x","session":"s-0123456789abcdef0123456789abcdef"}`,
		`{"code":"x","session":"s-0123456789abcdef0123456789abcdef","tools":["a"]}`,
		`{"code":"x","tools":["a","a"]}`,
		`{"code":"x","tools":["Bad"]}`,
		`{"code":"\u0000"}`,
		`{"code":"x","limits":{"memory":-1}}`,
		`{"code":"x"} {}`,
		`{"code":1}`,
		// Pauses and continues (suspend_tools, continue).
		`{"code":"add(1,2)","tools":["add"],"suspend_tools":["add"]}`,
		`{"code":"x","tools":["add"],"suspend_tools":["nope"]}`,
		`{"idempotency_key":"e-c","continue":{"from":"e-paused","approve":true}}`,
		`{"continue":{"from":"e-paused","deny":"no"}}`,
		`{"continue":{"from":"e-paused","reply":"s\na\u0000b"}}`,
		`{"continue":{"from":"e-paused","approve":true,"deny":"no"}}`,
		`{"continue":{"from":"e-paused"}}`,
		`{"continue":{"from":"../x","approve":true}}`,
		`{"code":"x","continue":{"from":"e-paused","approve":true}}`,
		`{"session":"s-0123456789abcdef0123456789abcdef","continue":{"from":"e-paused","approve":true}}`,
		`{"continue":{"from":"e-paused","approve":true,"from":"e-other"}}`,
		`{"continue":null,"code":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeEvalRequest(data)
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Code != CodeBadRequest {
				t.Fatalf("undocumented error %T %v", err, err)
			}
			return
		}
		if r.IdempotencyKey != "" && !ValidKey(r.IdempotencyKey) {
			t.Fatalf("bad key accepted: %q", r.IdempotencyKey)
		}
		if r.Session != "" && (!ValidSessionID(r.Session) || len(r.Tools) > 0) {
			t.Fatalf("bad session accepted: %q with %d tools", r.Session, len(r.Tools))
		}
		if c := r.Continue; c != nil && (r.Code != "" || len(r.Tools) > 0 || r.Session != "" || len(r.SuspendTools) > 0 || !ValidKey(c.From)) {
			t.Fatalf("a continue with its own program accepted: %+v %+v", r, c)
		}
		if strings.IndexByte(r.Code, 0) >= 0 || len(r.Tools) > MaxEvalTools || len(r.Args) > MaxArgs {
			t.Fatalf("out of bounds accepted: %+v", r)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeEvalRequest(again)
		if err != nil {
			t.Fatalf("re-encoded request refused: %v\n%s", err, again)
		}
		if EvalHash(r) != EvalHash(r2) || !slices.Equal(r.Tools, r2.Tools) || r.Code != r2.Code || r.Session != r2.Session {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", r, r2)
		}
	})
}

// FuzzDecodeToolResult: a tool result body is refused or has an ID and
// a reply.
func FuzzDecodeToolResult(f *testing.F) {
	for _, s := range []string{`{"id":1,"reply":"n"}`, `{"id":0,"reply":"n"}`, `{"id":2,"reply":""}`, `{"id":-1,"reply":"t"}`, `{"id":1,"reply":"j\n[1,NaN]"}`,
		// The relayed answers' shapes (relay.go): a NUL in the reply,
		// invalid UTF-8, the largest id, an id past uint64 or as a
		// string, a key twice, a trailing value.
		`{"id":1,"reply":"s\na\u0000b"}`, "{\"id\":1,\"reply\":\"s\n\xff\xfe\"}", `{"id":18446744073709551615,"reply":"n"}`,
		`{"id":18446744073709551616,"reply":"n"}`, `{"id":"1","reply":"n"}`, `{"id":1,"id":2,"reply":"n"}`, `{"id":1,"reply":"n"} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeToolResult(data)
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Code != CodeBadRequest {
				t.Fatalf("undocumented error %T %v", err, err)
			}
			return
		}
		if r.ID == 0 || r.Reply == "" {
			t.Fatalf("accepted %+v", r)
		}
	})
}
