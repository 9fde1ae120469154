package sbx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
)

type echoTools struct{}

func (echoTools) Names() []string { return []string{"a", "b"} }
func (echoTools) Call(ctx context.Context, name string, args []byte) []byte {
	return append([]byte("s\n"+name+":"), args...)
}
func (echoTools) Transcript() json.RawMessage { return nil }

func TestServeConn(t *testing.T) {
	host, guest := net.Pipe()
	go ServeConn(context.Background(), host, echoTools{})
	r := bufio.NewReader(guest)
	for _, tc := range []struct{ req, want string }{
		{"call\norders\n[[1],{}]", "s\norders:[[1],{}]"},
		{"list", `j\n["a","b"]`},
		{"nope", "err\nArgumentError\nunknown request (want call or list)"},
	} {
		WriteFrame(guest, []byte(tc.req))
		got, err := ReadFrame(r, MaxFrame)
		want := strings.ReplaceAll(tc.want, `\n`, "\n")
		if err != nil || string(got) != want {
			t.Errorf("%q: got %q, %v", tc.req, got, err)
		}
	}
	guest.Write([]byte("99999999999\n"))
	got, _ := ReadFrame(r, MaxFrame)
	if !bytes.HasPrefix(got, []byte("err\nArgumentError\nframe of")) {
		t.Errorf("oversized frame: %q", got)
	}
}

// FuzzReadFrame: arbitrary bytes from a guest never panic the reader nor
// make it allocate past the limit.
func FuzzReadFrame(f *testing.F) {
	for _, s := range []string{"4\nlist", "0\n", "-1\n", "5\nab", "x\n", "\n", "1048576\n", "12\ncall\nfoo\n[]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		for {
			got, err := ReadFrame(r, 1024)
			if err != nil {
				return
			}
			if len(got) > 1024 {
				t.Fatalf("frame of %d bytes", len(got))
			}
		}
	})
}

// A command cannot make the host hold more than MaxConns connections'
// frames: while MaxConns connections sit on announced-but-unsent frames,
// the next is not served; when one closes, it is.
func TestServeToolsConnectionCap(t *testing.T) {
	dir := t.TempDir()
	stop, _, err := ServeTools(context.Background(), &box.Command{Tools: echoTools{}}, dir, "/run/glovebox")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sock := filepath.Join(dir, "tools.sock")
	var held []net.Conn
	for range MaxConns {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("1048576\n")) // a header, and no body
		held = append(held, c)
	}
	extra, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	WriteFrame(extra, []byte("list"))
	extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	r := bufio.NewReader(extra)
	if got, err := ReadFrame(r, MaxFrame); err == nil {
		t.Fatalf("connection %d was served while %d were held: %q", MaxConns+1, MaxConns, got)
	}
	held[0].Close()
	extra.SetReadDeadline(time.Now().Add(30 * time.Second))
	if got, err := ReadFrame(r, MaxFrame); err != nil || !strings.HasPrefix(string(got), "j\n") {
		t.Fatalf("after a slot freed: %q, %v", got, err)
	}
}
