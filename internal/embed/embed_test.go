package embed

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// parent is a test's stand-in for the gem: the far end of the control
// socket and of the channels it hands over.
type parent struct {
	t    *testing.T
	ctl  *net.UnixConn
	done chan error
}

// startChild serves a child over a socketpair and says hello (unless
// protocol is 0).
func startChild(t *testing.T, protocol int) *parent {
	t.Helper()
	ours, theirs := socketpair(t)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- Serve(context.Background(), theirs, Options{Version: "test", Logger: log}) }()
	p := &parent{t: t, ctl: ours, done: done}
	t.Cleanup(func() {
		ours.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the child did not stop within 10 s of its control socket's end")
		}
	})
	if protocol != 0 {
		writeFrame(t, ours, 'Q', `{"op":"hello","protocol":`+strconv.Itoa(protocol)+`,"gem":"test"}`)
	}
	return p
}

func socketpair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conv(fds[0]), conv(fds[1])
}

func writeFrame(t *testing.T, c *net.UnixConn, typ byte, payload string) {
	t.Helper()
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b, uint32(1+len(payload)))
	b[4] = typ
	if _, err := c.Write(append(b, payload...)); err != nil {
		t.Fatal(err)
	}
}

func readFrame(t *testing.T, c *net.UnixConn) (byte, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(h[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	return b[0], string(b[1:])
}

// channel makes a socketpair, hands one end to the child and returns
// the other.
func (p *parent) channel() *net.UnixConn {
	p.t.Helper()
	ours, theirs := socketpair(p.t)
	f, err := theirs.File()
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	defer theirs.Close()
	frame := []byte{0, 0, 0, 0, 'Q'}
	frame = append(frame, `{"op":"channel"}`...)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	if _, _, err := p.ctl.WriteMsgUnix(frame, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { ours.Close() })
	return ours
}

func (p *parent) hello() {
	p.t.Helper()
	if typ, body := readFrame(p.t, p.ctl); typ != 'R' || !strings.Contains(body, `"protocol":1`) {
		p.t.Fatalf("hello answered %c %s", typ, body)
	}
}

// register sends a config on ch and returns its sid.
func register(t *testing.T, ch *net.UnixConn, config string) string {
	t.Helper()
	writeFrame(t, ch, 'Q', `{"op":"config","config":`+config+`}`)
	typ, body := readFrame(t, ch)
	var ans struct{ SID int }
	if typ != 'R' || json.Unmarshal([]byte(body), &ans) != nil || ans.SID == 0 {
		t.Fatalf("config answered %c %s", typ, body)
	}
	return strconv.Itoa(ans.SID)
}

// TestHelloOfAnotherProtocolRefused: the child names both versions and
// stops.
func TestHelloOfAnotherProtocolRefused(t *testing.T) {
	p := startChild(t, 2)
	typ, body := readFrame(t, p.ctl)
	if typ != 'X' || !strings.Contains(body, `"protocol_mismatch"`) || !strings.Contains(body, "embedded protocol 1") ||
		!strings.Contains(body, "protocol 2") {
		t.Fatalf("got %c %s", typ, body)
	}
	select {
	case err := <-p.done:
		if err == nil {
			t.Fatal("Serve returned nil after a refused hello")
		}
		p.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the child went on after a refused hello")
	}
}

// TestToolCallRoundTrip: an eval's tool call comes back on its channel
// with the time left before its deadline, and the answer reaches the
// guest; the result has no transcript (the parent keeps its own).
func TestToolCallRoundTrip(t *testing.T) {
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	sid := register(t, ch, `{"tools":["add"],"limits":{"timeout_ms":5000}}`)
	writeFrame(t, ch, 'Q', `{"op":"eval","sid":`+sid+`,"code":"puts 1; add(20, 22) + 1","stream":true}`)
	var out string
	for {
		typ, body := readFrame(t, ch)
		switch typ {
		case 'O':
			out += body
			continue
		case 'C':
			parts := strings.SplitN(body, "\n", 4)
			left, _ := strconv.Atoi(parts[1])
			if parts[0] != "1" || parts[2] != "add" || parts[3] != "[[20,22],{}]" || left <= 0 || left > 5_000_000 {
				t.Fatalf("call frame %q", body)
			}
			writeFrame(t, ch, 'A', "1\ni\n42")
			continue
		}
		if typ != 'R' || !strings.Contains(body, `"status":"ok"`) || !strings.Contains(body, `"value":"43"`) ||
			strings.Contains(body, "tool_calls") {
			t.Fatalf("eval answered %c %s", typ, body)
		}
		break
	}
	if out != "1\n" {
		t.Fatalf("streamed %q", out)
	}
}

// TestUnansweredCallEndsAtTheDeadline: a call the parent never answers
// ends the eval at its deadline; the late answer is dropped and the
// channel serves the next request.
func TestUnansweredCallEndsAtTheDeadline(t *testing.T) {
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	sid := register(t, ch, `{"tools":["slow"],"limits":{"timeout_ms":400}}`)
	start := time.Now()
	writeFrame(t, ch, 'Q', `{"op":"eval","sid":`+sid+`,"code":"slow"}`)
	if typ, _ := readFrame(t, ch); typ != 'C' {
		t.Fatalf("want the call, got %c", typ)
	}
	typ, body := readFrame(t, ch)
	if typ != 'R' || !strings.Contains(body, `"status":"timeout"`) {
		t.Fatalf("got %c %s", typ, body)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the eval ended %v after its start, its timeout 400 ms", el)
	}
	writeFrame(t, ch, 'A', "1\ns\ntoo late")
	writeFrame(t, ch, 'Q', `{"op":"eval","sid":`+sid+`,"code":"2 + 2"}`)
	if typ, body := readFrame(t, ch); typ != 'R' || !strings.Contains(body, `"value":"4"`) {
		t.Fatalf("next eval: %c %s", typ, body)
	}
}

// TestChannelGoneCancelsTheEval: a channel closed while its eval waits
// in a tool call, while it streams output, or while it computes and
// sends nothing (a parent thread killed mid-eval: watchHangup) ends the
// eval instead of leaving it to its deadline.
func TestChannelGoneCancelsTheEval(t *testing.T) {
	for name, c := range map[string]struct{ code, first string }{
		"in a call": {`loop { begin; wait; rescue => e; sleep 0.001; end }`, "C"},
		"streaming": {`loop { puts 'x' * 1000; sleep 0.001 }`, "O"},
		"computing": {`loop {}`, ""},
		"sleeping":  {`sleep 60`, ""},
	} {
		t.Run(name, func(t *testing.T) { channelGone(t, c.code, c.first) })
	}
}

func channelGone(t *testing.T, code, first string) {
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	sid := register(t, ch, `{"tools":["wait"],"limits":{"timeout_ms":60000,"tool_calls":1000000}}`)
	writeFrame(t, ch, 'Q', `{"op":"eval","sid":`+sid+`,"stream":true,"code":"`+code+`"}`)
	if first == "" { // nothing comes: wait until it runs
		waitRunning(t, p, 1)
		time.Sleep(100 * time.Millisecond)
	} else if typ, _ := readFrame(t, ch); string(rune(typ)) != first {
		t.Fatalf("want a %s frame, got %c", first, typ)
	}
	ch.Close()
	waitRunning(t, p, 0)
}

// waitRunning waits up to 10 s for info's running count to be n.
func waitRunning(t *testing.T, p *parent, n int) {
	t.Helper()
	want := `"running":` + strconv.Itoa(n) + `,`
	deadline := time.Now().Add(10 * time.Second)
	for {
		writeFrame(t, p.ctl, 'Q', `{"op":"info"}`)
		typ, body := readFrame(t, p.ctl)
		if typ == 'R' && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("running is not %d 10 s on: %c %s", n, typ, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConfigEnv: a config's env is the guest's whole ENV on each of its
// evals, a session's included (what the guest set in an earlier eval of
// the session is replaced); a config without env leaves ENV empty.
func TestConfigEnv(t *testing.T) {
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	eval := func(req string) string {
		t.Helper()
		writeFrame(t, ch, 'Q', req)
		typ, body := readFrame(t, ch)
		if typ != 'R' {
			t.Fatalf("%s: %c %s", req, typ, body)
		}
		return body
	}
	sid := register(t, ch, `{"tools":[],"limits":{},"env":{"MODE":"batch","LANG":"C"}}`)
	if body := eval(`{"op":"eval","sid":` + sid + `,"code":"ENV.to_h.sort.inspect"}`); !strings.Contains(body, `"value":"\"[[\\\"LANG\\\", \\\"C\\\"], [\\\"MODE\\\", \\\"batch\\\"]]\""`) {
		t.Fatalf("ENV: %s", body)
	}
	writeFrame(t, ch, 'Q', `{"op":"session_open","sid":`+sid+`}`)
	typ, body := readFrame(t, ch)
	var s struct{ ID string }
	if typ != 'R' || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("session_open: %c %s", typ, body)
	}
	eval(`{"op":"eval","session":"` + s.ID + `","code":"ENV['EXTRA'] = '1'; ENV['MODE'] = 'x'"}`)
	if body := eval(`{"op":"eval","session":"` + s.ID + `","code":"ENV.to_h.keys.sort.join(' ') + ENV['MODE']"}`); !strings.Contains(body, `"value":"\"LANG MODEbatch\""`) {
		t.Fatalf("session ENV: %s", body)
	}
	plain := register(t, ch, `{"tools":[],"limits":{}}`)
	if body := eval(`{"op":"eval","sid":` + plain + `,"code":"ENV.size"}`); !strings.Contains(body, `"value":"0"`) {
		t.Fatalf("ENV without env: %s", body)
	}
}

// TestStrictRequests: an unknown field, a missing code, an unknown op
// and an unregistered config are refused with their codes; nothing runs.
func TestStrictRequests(t *testing.T) {
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	for req, code := range map[string]string{
		`{"op":"eval","sid":1,"code":"1","bogus":true}`:                    "bad_request",
		`{"op":"eval","sid":99,"code":"1"}`:                                "unknown_config",
		`{"op":"launch"}`:                                                  "bad_request",
		`{"op":"config","config":{"tools":["puts"],"limits":{}}}`:          "bad_request",
		`{"op":"config","config":{"tools":[],"env":{"A=":"b"}}}`:           "bad_request",
		`{"op":"continue","from":"gbp1.x","approve":true}`:                 "bad_request",
		`{"op":"session_close","id":"s-00000000000000000000000000000000"}`: "not_found",
	} {
		writeFrame(t, ch, 'Q', req)
		typ, body := readFrame(t, ch)
		if typ != 'X' || !strings.Contains(body, `"code":"`+code+`"`) {
			t.Errorf("%s: got %c %s, want %s", req, typ, body, code)
		}
	}
	sid := register(t, ch, `{"tools":[],"limits":{}}`)
	writeFrame(t, ch, 'Q', `{"op":"eval","sid":`+sid+`}`)
	if typ, body := readFrame(t, ch); typ != 'X' || !strings.Contains(body, "code: missing") {
		t.Fatalf("an eval without code: %c %s", typ, body)
	}
	// A frame of length 0 is a broken parent: the channel closes.
	ch.Write([]byte{0, 0, 0, 0})
	ch.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := ch.Read(make([]byte, 1)); err != io.EOF || n != 0 {
		t.Fatalf("after a zero-length frame: %d, %v", n, err)
	}
}

// TestFirstRequestMustBeHello: anything before the hello is refused and
// the child stops.
func TestFirstRequestMustBeHello(t *testing.T) {
	p := startChild(t, 0)
	writeFrame(t, p.ctl, 'Q', `{"op":"info"}`)
	if typ, body := readFrame(t, p.ctl); typ != 'X' || !bytes.Contains([]byte(body), []byte("hello")) {
		t.Fatalf("got %c %s", typ, body)
	}
}

// TestStateKeyAfterHello: a state key sent after the hello (the app set
// Glovebox.state_key once the child ran) reaches the running child:
// configs registered before it are dropped (unknown_config: the parent
// registers again), and evals of the new ones pause; a session opened
// before it says it cannot pause; a bad key is refused and changes
// nothing.
func TestStateKeyAfterHello(t *testing.T) {
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	ask := func(c *net.UnixConn, req string) (byte, string) {
		t.Helper()
		writeFrame(t, c, 'Q', req)
		return readFrame(t, c)
	}
	sid := register(t, ch, `{"tools":["plan"],"limits":{}}`)
	_, body := ask(ch, `{"op":"session_open","sid":`+sid+`}`)
	var ss struct{ ID string }
	json.Unmarshal([]byte(body), &ss)
	pause := `,"code":"plan","suspend":["plan"]}`
	if typ, body := ask(ch, `{"op":"eval","sid":`+sid+pause); typ != 'X' || !strings.Contains(body, "needs a state key") {
		t.Fatalf("before the key: %c %s", typ, body)
	}
	if typ, body := ask(p.ctl, `{"op":"state_key","state_key":"12"}`); typ != 'X' || !strings.Contains(body, "64 hex digits") {
		t.Fatalf("a bad key: %c %s", typ, body)
	}
	dir := t.TempDir()
	if typ, body := ask(p.ctl, `{"op":"state_key","state_key":"`+strings.Repeat("7c", 32)+`","state_dir":"`+dir+`"}`); typ != 'R' {
		t.Fatalf("state_key: %c %s", typ, body)
	}
	if typ, body := ask(p.ctl, `{"op":"info"}`); typ != 'R' || !strings.Contains(body, `"suspend":true`) {
		t.Fatalf("info: %c %s", typ, body)
	}
	if typ, body := ask(ch, `{"op":"eval","sid":`+sid+pause); typ != 'X' || !strings.Contains(body, `"unknown_config"`) {
		t.Fatalf("an old config: %c %s", typ, body)
	}
	sid = register(t, ch, `{"tools":["plan"],"limits":{}}`)
	if typ, body := ask(ch, `{"op":"eval","sid":`+sid+pause); typ != 'R' || !strings.Contains(body, `"status":"suspended"`) ||
		!strings.Contains(body, `"state":"gbp1.`) {
		t.Fatalf("after the key: %c %s", typ, body)
	}
	if typ, body := ask(ch, `{"op":"eval","session":"`+ss.ID+`"`+pause); typ != 'X' || !strings.Contains(body, "opened before Glovebox.state_key was set") {
		t.Fatalf("a session opened before the key: %c %s", typ, body)
	}
}
