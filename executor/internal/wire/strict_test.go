package wire

import (
	"fmt"
	"strings"
	"testing"
)

// TestStrictRefusesAmbiguousBodies: encoding/json lets the last of two
// equal keys win and matches field names without regard to case, so
// {"command": A, "COMMAND": B} runs B while anything that read the body
// before the executor (a proxy's audit log, a policy check) saw A; and it
// silently replaces invalid UTF-8, running a command other than the one
// sent. All are refused as bad_request, without quoting the body.
func TestStrictRefusesAmbiguousBodies(t *testing.T) {
	for _, body := range []string{
		`{"command":{"shell":"true"},"COMMAND":{"shell":"echo other"}}`,
		`{"command":{"shell":"true","Shell":"echo other"}}`,
		`{"command":{"shell":"true"},"command":{"shell":"echo other"}}`,
		`{"command":{"shell":"true","env":{"A":"1","A":"2"}}}`,
		`{"command":{"shell":"true"},"credentials":{"K":"canary-1","K":"canary-2"}}`,
		"{\"command\":{\"shell\":\"echo \xff\"}}",
		`{"command":{"shell":"true"},"Idempotency_Key":"a","idempotency_key":"b"}`,
		// The same key spelt with escapes, and one after nested values.
		`{"comm\u0061nd":{"shell":"true"},"command":{"shell":"echo other"}}`,
		`{"command":{"shell":"true","env":{"A":"1","\u0041":"2"}}}`,
		`{"command":{"argv":["a","b"],"timeout_ms":2500,"network":{"allow":["x"]}} , "COMMAND" : {"shell":"echo other"}}`,
		`{"command":{"shell":"true"},"credentials":{"K":"canary-1","\u004b":"canary-2"}}`,
	} {
		_, err := DecodeRunRequest([]byte(body))
		if err == nil || err.(*Error).Code != CodeBadRequest {
			t.Errorf("%q: %v, want bad_request", body, err)
			continue
		}
		if strings.Contains(err.Error(), "canary") || strings.Contains(err.Error(), "other") {
			t.Errorf("%q: the error quotes the body: %v", body, err)
		}
	}
	// Map keys differing only in case are distinct names (Linux
	// environments are case-sensitive) and stay accepted.
	for _, body := range []string{
		`{"command":{"shell":"true","env":{"Path":"1","PATH":"2"}}}`,
		`{"command":{"shell":"true","files":{"a.txt":"","A.txt":""}},"credentials":{"k":"x","K":"y"}}`,
		`{"command":{"shell":"true","ENV":{"Path":"1","PATH":"2"}}}`,
		`{"command":{"argv":["a","a"],"network":{"allow":["x","x"]}}}`,
		` { "command" : { "shell" : "true" , "env" : { "a\"b" : "1" , "a\\b" : "2" } } } `,
	} {
		if _, err := DecodeRunRequest([]byte(body)); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	// Past 16 keys an object's are kept in a map: a duplicate is still
	// found, and distinct keys still pass.
	env := ""
	for i := range 40 {
		env += fmt.Sprintf(`"K%d":"v",`, i)
	}
	if _, err := DecodeRunRequest([]byte(`{"command":{"shell":"true","env":{` + env + `"K3":"canary"}}}`)); err == nil {
		t.Error("an env with a key twice, among 41, was accepted")
	}
	if _, err := DecodeRunRequest([]byte(`{"command":{"shell":"true","env":{` + env + `"K40":"v"}}}`)); err != nil {
		t.Errorf("an env of 41 keys: %v", err)
	}
	if _, err := DecodeEvalRequest([]byte(`{"code":"1","Code":"2"}`)); err == nil {
		t.Error("an eval request with code twice was accepted")
	}
	if _, err := DecodeToolResult([]byte(`{"id":1,"reply":"n","reply":"s\nx"}`)); err == nil {
		t.Error("a tool result with two replies was accepted")
	}
}
