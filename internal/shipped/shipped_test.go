package shipped

import (
	"strings"
	"testing"
)

func TestFormatParse(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	in := map[string]string{"ruby-plain-amd64-x.cwasm": sum, "ruby-metered-amd64-y.cwasm": sum}
	if f := Format(in); f != "ruby-metered-amd64-y.cwasm="+sum+",ruby-plain-amd64-x.cwasm="+sum {
		t.Errorf("Format: %s", f)
	}
	got := Parse(Format(in) + ",../evil.cwasm=" + sum + ",..=" + sum + ",short=abc,noequals,=" + sum)
	if len(got) != 2 || got["ruby-plain-amd64-x.cwasm"] != sum || got["ruby-metered-amd64-y.cwasm"] != sum {
		t.Errorf("Parse: %v", got)
	}
	if len(Parse("")) != 0 {
		t.Error("an empty list parsed to something")
	}
}
