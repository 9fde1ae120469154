package clientwire

import (
	"errors"
	"fmt"
	"math/big"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// FuzzDecodeReply: whatever a client sends as a tool answer, the guest
// gets a value, an exception of a well-formed class, or an abort with
// one of the two statuses a client may end an eval with — and the
// executor never panics.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range []string{"n", "t", "f", "s\nhi", "i\n42", "i\n123456789012345678901234567890", "j\n[1,{\"a\":NaN}]",
		"err\nArgumentError\nwrong", "err\nlower\nx", "abort\ntool_budget_exceeded\nspent", "abort\nok\nx", "x", "", "j\n[", "i\n1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rep string) {
		v, err := DecodeReply(rep)
		if err == nil {
			switch v.(type) {
			case nil, bool, string, int64, *big.Int, float64, []any, map[string]any:
			default:
				t.Fatalf("%q gave a %T", rep, v)
			}
			return
		}
		var ge *engine.GuestError
		var ab *engine.Abort
		switch {
		case errors.As(err, &ge):
			if !classRE.MatchString(ge.Class) {
				t.Fatalf("%q raised class %q", rep, ge.Class)
			}
		case errors.As(err, &ab):
			if ab.Status != engine.StatusToolBudgetExceeded && ab.Status != engine.StatusTimeout {
				t.Fatalf("%q aborted with %q", rep, ab.Status)
			}
		default:
			t.Fatalf("%q: %T %v", rep, err, err)
		}
	})
}

func TestDecodeReplyExact(t *testing.T) {
	for rep, want := range map[string]string{
		"n": "<nil>", "t": "true", "s\nx\ny": "x\ny", "i\n-7": "-7", "i\n99999999999999999999": "99999999999999999999",
		"j\n[1,2.5]": "[1 2.5]", "nope": "ToolError: the client sent a malformed tool answer",
		"err\nToolDenied\nno": "ToolDenied: no", "abort\ntimeout\nlate": "timeout: late",
	} {
		v, err := DecodeReply(rep)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = fmtAny(v)
		}
		if got != want {
			t.Errorf("%q → %q, want %q", rep, got, want)
		}
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }
