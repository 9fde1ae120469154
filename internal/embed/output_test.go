package embed

import (
	"strings"
	"testing"
)

// TestByteWritesAreCoalesced: a guest writing its output a byte at a
// time once sent a frame a byte (a million frames for 1 MiB, each
// costing the parent, which holds Ruby's interpreter lock, microseconds).
// Frames now carry what waited up to outputDelay or outputChunk, and
// the order of stdout, stderr and tool calls holds.
func TestByteWritesAreCoalesced(t *testing.T) {
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	sid := register(t, ch, `{"tools":["mark"],"limits":{"timeout_ms":60000}}`)
	code := `$stdout.sync = true; $stderr.sync = true; ` +
		`20_000.times { $stdout.write('a') }; $stderr.write('e'); mark; 20_000.times { $stdout.write('b') }; :done`
	writeFrame(t, ch, 'Q', `{"op":"eval","sid":`+sid+`,"stream":true,"code":"`+code+`"}`)
	var seq strings.Builder // the streams in order: a run of a's, e, C, b's
	frames := 0
	for {
		typ, body := readFrame(t, ch)
		switch typ {
		case 'O', 'E':
			frames++
			seq.WriteString(body)
			continue
		case 'C':
			seq.WriteString("|C|")
			writeFrame(t, ch, 'A', strings.SplitN(body, "\n", 2)[0]+"\nn")
			continue
		}
		if typ != 'R' || !strings.Contains(body, `"status":"ok"`) {
			t.Fatalf("eval answered %c %s", typ, body)
		}
		break
	}
	want := strings.Repeat("a", 20000) + "e|C|" + strings.Repeat("b", 20000)
	if seq.String() != want {
		t.Fatalf("the streams arrived out of order or incomplete (%d bytes, want %d)", seq.Len(), len(want))
	}
	if frames > 4000 { // at most 3,000 by time alone: the eval's 60 s timeout over outputDelay
		t.Fatalf("%d output frames for 40,001 one-byte writes: not coalesced", frames)
	}
}
