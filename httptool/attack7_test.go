package httptool

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
)

// rawServer is a loopback server that reads each request head and hands
// the connection to h, for responses net/http's server would not send.
func rawServer(t *testing.T, h func(c net.Conn, req *http.Request)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				h(c, req)
			}()
		}
	}()
	return ln.Addr().String()
}

// guestMessage is the message the guest sees for err.
func guestMessage(t *testing.T, err error) string {
	t.Helper()
	var te *glovebox.ToolError
	if !errors.As(err, &te) {
		t.Fatalf("not a ToolError: %v", err)
	}
	return te.Message
}

// TestNetworkErrorsHideAddresses: a connection that fails on the way
// must not tell the guest the address the name resolved to, nor the
// host's own address (net.OpError prints "read tcp LOCAL->REMOTE"); the
// audit entry keeps them.
func TestNetworkErrorsHideAddresses(t *testing.T) {
	// A reset in the middle of the body.
	addr := rawServer(t, func(c net.Conn, req *http.Request) {
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"))
		c.(*net.TCPConn).SetLinger(0) // close sends RST
	})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{})
	f.dial.server = addr
	_, err := f.call("http_get", "http://api.example.com/")
	wantClass(t, err, ClassTransport)
	if msg := guestMessage(t, err); strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "connection reset") {
		t.Errorf("guest message %q", msg)
	}
	if a := f.audit[0].Addr; a != netip.MustParseAddrPort("93.184.216.34:80") {
		t.Errorf("audit address %v", a)
	}

	// A refused connection through the real dialer, to a trusted
	// internal address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	tool, err := New(Config{
		AllowHosts: []string{"svc.internal.test"}, Ports: []int{port},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:        newResolver("svc.internal.test", []string{"127.0.0.1"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = callTool(tool, "http_get", glovebox.Args{Positional: []any{"http://svc.internal.test:" + strconv.Itoa(port) + "/"}})
	wantClass(t, err, ClassTransport)
	if msg := guestMessage(t, err); strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "connection refused") {
		t.Errorf("guest message %q", msg)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("the host-side error %q does not say which address failed", err)
	}
}

// TestAttackAddressSpellings: with every permissive switch on (AnyHost,
// IP literals, many ports), no spelling of a loopback, private, metadata
// or otherwise special address reaches a dial, whether written in the URL
// or answered by the resolver.
func TestAttackAddressSpellings(t *testing.T) {
	refused := []string{
		// IPv4 spellings.
		"http://127.0.0.1/", "http://0x7f.1/", "http://0x7F.0.0.1/", "http://0177.0.0.1/", "http://2130706433/",
		"http://127.1/", "http://0.0.0.0/", "http://0/", "http://0x0/", "http://127.0.0.1./", "http://127.000.000.001/",
		"http://169.254.169.254/", "http://169.254.43518/", "http://0xa9fea9fe/", "http://2852039166/", "http://0251.0376.0251.0376/",
		"http://100.64.0.1/", "http://100.127.255.254/", "http://198.18.0.1/", "http://198.19.255.255/", "http://192.0.0.1/",
		"http://192.0.0.192/", "http://240.0.0.1/", "http://255.255.255.255/", "http://224.0.0.1/", "http://10.0.0.1/",
		"http://172.16.0.1/", "http://192.168.0.1/", "http://100.100.100.200/", "http://169.254.170.2/",
		"http://%31%32%37.0.0.1/", "http://127.0.0.%31/", "http://①②⑦.0.0.1/", "http://127。0。0。1/",
		// IPv6 spellings.
		"http://[::]/", "http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[::1%25lo]/", "http://[::1%lo]/",
		"http://[::ffff:7f00:1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:0:7f00:1]/", "http://[::ffff:0:127.0.0.1]/",
		"http://[64:ff9b::7f00:1]/", "http://[64:ff9b::127.0.0.1]/", "http://[64:ff9b:1::7f00:1]/", "http://[64:ff9b:1:ffff::a9fe:a9fe]/",
		"http://[2002:7f00:1::]/", "http://[2002:a9fe:a9fe::1]/", "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
		"http://[2001::ffff:ffff]/", "http://[::127.0.0.1]/", "http://[::7f00:1]/", "http://[fec0::1]/", "http://[fc00::1]/",
		"http://[fd00:ec2::254]/", "http://[fe80::1]/", "http://[fe80::1%25eth0]/", "http://[ff02::1]/", "http://[100::1]/",
		"http://[2001:db8::1]/", "http://[::ffff:169.254.169.254]/", "http://[::ffff:a9fe:a9fe]/", "http://[0::ffff:7f00:1]/",
		"http://[::FFFF:7F00:1]/", "http://[0000:0000:0000:0000:0000:ffff:7f00:0001]/",
		// Parser confusion.
		`http://a.example.com\@127.0.0.1/`, "http://a.example.com@127.0.0.1/", "http://a.example.com%40127.0.0.1/",
		"http://127.0.0.1%2f@a.example.com/", "http://a%40b@127.0.0.1/", "http:/127.0.0.1/", `http:\\127.0.0.1\`,
		"http:127.0.0.1", "HTTP://127.0.0.1/", "http://127.0.0.1:80:80/", "http://127.0.0.1:0/", "http://127.0.0.1:65616/",
		"http://127.0.0.1:00080/", "http://[::1]:80/", "http://[::1]]/", "http://[[::1]]/", "http://127.0.0.1#@a.example.com/",
		"gopher://127.0.0.1:80/", "http+unix://127.0.0.1/", "ht\ttp://127.0.0.1/", " http://127.0.0.1/",
		"http://localhost/", "http://LOCALHOST./", "http://localhost.localdomain/", "http://127.0.0.1.nip.io/",
		"http://7f000001.nip.io/", "http://metadata.google.internal/", "http://[::ffff:127.0.0.1]:80@a.example.com/",
	}
	res := newResolver(
		"localhost", []string{"127.0.0.1", "::1"},
		"localhost.localdomain", []string{"127.0.0.1"},
		"127.0.0.1.nip.io", []string{"127.0.0.1"},
		"7f000001.nip.io", []string{"::ffff:127.0.0.1"},
		"metadata.google.internal", []string{"169.254.169.254"},
	)
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{
		AnyHost: true, AllowIPLiterals: true, Resolver: res, Ports: []int{80, 443, 8080},
	})
	for _, u := range refused {
		_, err := f.call("http_get", u)
		switch class(err) {
		case ClassURL, ClassBlockedAddress, ClassTransport:
			if class(err) == ClassTransport && !strings.Contains(err.Error(), "does not exist") {
				t.Errorf("%q: %v", u, err)
			}
		default:
			t.Errorf("%q: %v, want a refusal", u, err)
		}
	}
	if got := f.dial.addresses(); len(got) != 0 || f.hits.Load() != 0 {
		t.Fatalf("dialed %v", got)
	}
}

// oddResolver gives one fixed answer, without error, whatever it is
// asked: empty, invalid or zoned addresses included.
type oddResolver struct{ answer []netip.Addr }

func (r oddResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return r.answer, nil
}

// TestAttackResolverAnswers: every special address a resolver may
// answer, alone or among public ones, refuses the request before a dial;
// so do empty, invalid and zoned answers.
func TestAttackResolverAnswers(t *testing.T) {
	bad := []string{
		"127.0.0.1", "127.255.255.255", "0.0.0.0", "10.1.2.3", "172.31.0.1", "192.168.1.1", "100.64.0.1", "100.127.0.1",
		"169.254.169.254", "169.254.170.2", "169.254.0.1", "100.100.100.200", "192.0.0.192", "192.0.0.1", "198.18.0.1", "198.19.0.1",
		"240.0.0.1", "255.255.255.255", "224.0.0.251", "192.0.2.1", "198.51.100.1", "203.0.113.1",
		"::", "::1", "::ffff:127.0.0.1", "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a00:1",
		"64:ff9b:1::1", "2002:7f00:1::", "2002:a00:1::", "2001:0:4136:e378:8000:63bf:80ff:fffe", "2001::1", "::127.0.0.1",
		"::a9fe:a9fe", "fec0::1", "fc00::1", "fd00:ec2::254", "fe80::1", "ff02::1", "ff0e::1", "100::1", "2001:db8::1",
		"2001:10::1", "2001:20::1", "3fff::1", "5f00::1",
	}
	for _, b := range bad {
		for _, set := range [][]string{{b}, {"93.184.216.34", b}, {b, "2606:2800:220:1:248:1893:25c8:1946"}} {
			f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: newResolver("api.example.com", set)})
			_, err := f.call("http_get", "http://api.example.com/")
			if class(err) != ClassBlockedAddress {
				t.Errorf("%v: %v", set, err)
			}
			if len(f.dial.addresses()) != 0 {
				t.Errorf("%v: dialed %v", set, f.dial.addresses())
			}
		}
	}
	for _, answer := range [][]netip.Addr{nil, {}, {{}}, {netip.MustParseAddr("93.184.216.34"), {}}, {netip.MustParseAddr("2606:2800:220:1::1%eth0")}, {netip.MustParseAddr("::ffff:93.184.216.34%eth0")}} {
		f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: oddResolver{answer}})
		_, err := f.call("http_get", "http://api.example.com/")
		if c := class(err); c != ClassBlockedAddress && c != ClassTransport {
			t.Errorf("%v: %v", answer, err)
		}
		if len(f.dial.addresses()) != 0 {
			t.Errorf("%v: dialed %v", answer, f.dial.addresses())
		}
	}
}

// TestAttackEvalEndsMidRequest: an eval whose time runs out while a
// request waits on a server that never answers ends as a timeout; the
// request is canceled with it (not left to run its 10 s RequestTimeout),
// counted once, and charged only the time it ran.
func TestAttackEvalEndsMidRequest(t *testing.T) {
	rt := guestRuntime(t)
	short, err := rt.WithLimits(glovebox.Limits{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	guest.mu.Lock()
	before := len(guest.audit)
	guest.mu.Unlock()
	res, err := short.Eval(context.Background(), `http_get("http://api.example.com/slow")`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusTimeout {
		t.Fatalf("status %s: %+v", res.Status, res.Error)
	}
	guest.mu.Lock()
	entries := append([]AuditEntry(nil), guest.audit[before:]...)
	guest.mu.Unlock()
	if len(entries) != 1 || !strings.Contains(entries[0].Err.Error(), "the eval is ending") {
		t.Fatalf("audit %+v", entries)
	}
	guest.tool.mu.Lock()
	requests, spent := guest.tool.requests, guest.tool.spent
	guest.tool.mu.Unlock()
	if requests != 1 || spent >= DefaultRequestTimeout {
		t.Fatalf("%d requests, %v spent", requests, spent)
	}
	if got := evalOK(t, `http_get("http://api.example.com/")["status"]`); got != int64(200) {
		t.Fatal(got)
	}
}

// TestAttackHostileResponses: responses a hostile server may send each
// end in a capped answer or a clear guest error, never a hang past
// RequestTimeout (a hang would fail the test by its own timeout).
func TestAttackHostileResponses(t *testing.T) {
	big := strings.Repeat("a", 300)
	for _, c := range []struct {
		name, resp, want, body string
		hold                   bool // keep the connection open after writing
	}{
		{"100-continue flood", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 100000) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", ClassResponseTooLarge, "", false},
		{"103 repeated", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n", 20) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "", "ok", false},
		{"103 flood", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n", 10000) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", ClassResponseTooLarge, "", false},
		{"Content-Length shorter than body", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", "", "ok", false},
		{"Content-Length longer than body", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nok", ClassTimeout, "", true},
		{"Content-Length longer, closed", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nok", ClassTransport, "", false},
		{"Content-Length over the cap", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\nok", ClassResponseTooLarge, "", true},
		{"two Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk", ClassTransport, "", false},
		{"HTTP/1.0 without length", "HTTP/1.0 200 OK\r\n\r\n" + big, ClassResponseTooLarge, "", false},
		{"HTTP/1.0 without length, small", "HTTP/1.0 200 OK\r\n\r\nsmall", "", "small", false},
		{"HTTP/1.0 without length, endless", "HTTP/1.0 200 OK\r\n\r\nsmall", ClassTimeout, "", true},
		{"chunked without end", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", ClassTimeout, "", true},
		{"chunk over the cap", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n" + big, ClassResponseTooLarge, "", true},
		{"huge chunk extension", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=" + strings.Repeat("e", 1<<20) + "\r\nabc\r\n0\r\n\r\n", ClassTransport, "", false},
		{"chunk extension flood", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1;x="+strings.Repeat("e", 1000)+"\r\na\r\n", 1000) + "0\r\n\r\n", ClassTransport, "", false},
		{"trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: secret\r\n\r\n", "", "abc", false},
		{"huge trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: " + strings.Repeat("t", 1<<20) + "\r\n\r\n", ClassTransport, "", false},
		{"one huge header", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 1<<20) + "\r\nContent-Length: 2\r\n\r\nok", ClassResponseTooLarge, "", false},
		{"many small headers", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", 200000) + "Content-Length: 2\r\n\r\nok", ClassResponseTooLarge, "", false},
		{"endless header", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("b", 100), ClassTimeout, "", true},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok", "", "ok", false},
		{"101 switch", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + big, ClassResponseTooLarge, "", true},
		{"gzip, gzip", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip, gzip\r\nContent-Length: 3\r\n\r\nabc", "", "abc", false},
		{"broken gzip", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", ClassTransport, "", false},
		{"unknown transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", ClassTransport, "", false},
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n", ClassTransport, "", false},
		{"status 999", "HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\nok", "", "ok", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			addr := rawServer(t, func(conn net.Conn, req *http.Request) {
				conn.Write([]byte(c.resp))
				if c.hold {
					<-release
				}
			})
			f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{MaxResponseBody: 100, MaxResponseHeader: 8 << 10, RequestTimeout: 200 * time.Millisecond})
			f.dial.server = addr
			res, err := f.call("http_get", "http://api.example.com/")
			if class(err) != c.want {
				t.Fatalf("%v, want %q", err, c.want)
			}
			if err == nil && res["body"] != c.body {
				t.Fatalf("%#v", res)
			}
			if h, _ := res["headers"].(map[string]any); h["x-t"] != nil {
				t.Fatalf("a trailer reached the guest: %#v", h)
			}
		})
	}
}

// TestAttackGzipBombMemory: a 1 GiB gzip bomb (about 1 MiB on the wire)
// is refused after MaxResponseBody decompressed bytes, and the host
// allocates about what it received, not what the bomb would become.
func TestAttackGzipBombMemory(t *testing.T) {
	// 1024 gzip members of 1 MiB of zeros each: one gzip stream to a
	// reader (members concatenate), quick to build.
	var member, deflated bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	zw.Write(zeros)
	zw.Close()
	bomb := bytes.NewBuffer(bytes.Repeat(member.Bytes(), 1024))
	fw, _ := flate.NewWriter(&deflated, flate.BestCompression)
	fw.Write(zeros)
	fw.Close()
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb.Bytes())
		case "/gzip-chunked": // no Content-Length
			w.Header().Set("Content-Encoding", "gzip")
			for b := bomb.Bytes(); len(b) > 0; b = b[min(len(b), 4096):] {
				w.Write(b[:min(len(b), 4096)])
				w.(http.Flusher).Flush()
			}
		case "/deflate", "/br": // not decoded by the tool: the guest gets the bytes sent, capped as they are
			w.Header().Set("Content-Encoding", strings.TrimPrefix(r.URL.Path, "/"))
			w.Write(deflated.Bytes())
		}
	}, Config{})
	for _, path := range []string{"/gzip", "/gzip-chunked", "/deflate", "/br"} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := f.call("http_get", "http://api.example.com"+path)
		runtime.ReadMemStats(&after)
		if strings.HasPrefix(path, "/gzip") {
			wantClass(t, err, ClassResponseTooLarge)
		} else if err != nil || res["body"] != base64.StdEncoding.EncodeToString(deflated.Bytes()) {
			t.Errorf("%s: not passed through as sent: %v", path, err)
		}
		// The bomb itself is ~1 MiB and the server's copy of it is made
		// outside the measurement; 16 MiB is far below 1 GiB.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
			t.Errorf("%s: %d bytes allocated for one refused response", path, grew)
		}
	}
}

// TestAttackTrustedTranslationPrefix: an operator on an IPv6-only
// network trusts the NAT64 prefix so the guest can reach the IPv4
// internet through the gateway. The metadata endpoints must stay refused
// in that clothing too, as Config.TrustedPrefixes promises, and so must
// the private networks a NAT64 gateway inside a cloud network reaches.
func TestAttackTrustedTranslationPrefix(t *testing.T) {
	fl := newFloor([]netip.Prefix{
		netip.MustParsePrefix("64:ff9b::/96"),
		netip.MustParsePrefix("2002::/16"),
		netip.MustParsePrefix("::ffff:0:0/96"),
	}, DefaultPorts)
	for _, a := range []string{"64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:aa02", "64:ff9b::6464:64c8", "2002:a9fe:a9fe::", "::ffff:169.254.169.254"} {
		if why := fl.check(netip.MustParseAddr(a)); !strings.Contains(why, "metadata") {
			t.Errorf("%s under a trusted translation prefix: %q, want a metadata refusal", a, why)
		}
	}
	// Nor does the gateway open the private IPv4 networks behind it,
	// unless those are trusted too.
	for _, a := range []string{"64:ff9b::a00:1", "64:ff9b::7f00:1", "::ffff:10.0.0.1", "2002:a00:1::"} {
		if why := fl.check(netip.MustParseAddr(a)); why == "" {
			t.Errorf("%s under a trusted translation prefix was allowed", a)
		}
	}
	if why := fl.check(netip.MustParseAddr("64:ff9b::5db8:d822")); why != "" {
		t.Errorf("a trusted NAT64 form of a public address: %q", why)
	}
	both := newFloor([]netip.Prefix{netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("10.0.0.0/8")}, DefaultPorts)
	if why := both.check(netip.MustParseAddr("64:ff9b::a00:1")); why != "" {
		t.Errorf("NAT64 form of a trusted private address: %q", why)
	}
	if why := both.check(netip.MustParseAddr("64:ff9b::a9fe:a9fe")); !strings.Contains(why, "metadata") {
		t.Errorf("NAT64 form of the metadata address with 10/8 trusted: %q", why)
	}
}

// TestAttackResetDuringRequest: Reset starts a new unit of work; a
// request admitted before it and finishing after must not charge its time
// to the new unit (with MaxTime equal to RequestTimeout, one such request
// could leave the next unit no time at all).
func TestAttackResetDuringRequest(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
	}, Config{})
	done := make(chan error)
	go func() {
		_, err := f.call("http_get", "http://api.example.com/slow")
		done <- err
	}()
	<-arrived
	f.tool.Reset()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.tool.mu.Lock()
	requests, spent := f.tool.requests, f.tool.spent
	f.tool.mu.Unlock()
	if requests != 0 || spent != 0 {
		t.Fatalf("after Reset: %d requests, %v spent, charged by a request of the previous unit", requests, spent)
	}
}

// TestAttackSessionsShareBudget: sessions evaluating at once share the
// tool's request budget; together they make exactly MaxRequests requests.
func TestAttackSessionsShareBudget(t *testing.T) {
	rt := guestRuntime(t)
	var wg sync.WaitGroup
	counts := make([]int64, 3)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := rt.NewSession()
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			res, err := s.Eval(context.Background(), `
				n = 0
				begin
				  loop { http_get("http://api.example.com/"); n += 1 }
				rescue Glovebox::HTTPBudgetError
				end
				n`)
			if err != nil || res.Status != glovebox.StatusOK {
				t.Errorf("%v %+v", err, res)
				return
			}
			counts[i] = res.Value.(int64)
		}()
	}
	wg.Wait()
	if total := counts[0] + counts[1] + counts[2]; total != int64(guest.tool.cfg.MaxRequests) {
		t.Fatalf("sessions made %v requests, %d in all; the budget is %d", counts, total, guest.tool.cfg.MaxRequests)
	}
}

// TestAttackGuestReach: guest code finds nothing of the tool but its
// functions: no constant, instance variable or method leads to budgets,
// resolver or config, the bridge refuses names it was not given, and no
// method, header or URL turns a request into a tunnel or a second
// request.
func TestAttackGuestReach(t *testing.T) {
	got := evalOK(t, `
		def try
		  r = yield
		  r.is_a?(Hash) ? r["status"] : r.inspect[0, 80]
		rescue Glovebox::ToolError, Glovebox::UnknownToolError, ArgumentError, TypeError => e
		  e.class.name
		end
		found = (Glovebox.constants.map(&:to_s) + Glovebox.instance_variables.map(&:to_s) +
		         Glovebox.singleton_methods.map(&:to_s) + instance_variables.map(&:to_s) +
		         global_variables.map(&:to_s)).grep(/budget|resolv|config|reset|tool_?cfg|allow|trust|dial/i)
		[found,
		 try { Glovebox.call("reset") },
		 try { Glovebox.call("http_request ") },
		 try { Glovebox.call("HTTP_GET", "http://api.example.com/") },
		 try { Glovebox.call("http_get\0", "http://api.example.com/") },
		 try { http_request("CONNECT", "api.example.com:443") },
		 try { http_request("CONNECT", "http://api.example.com:443/") },
		 try { http_request("GET /x HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\nGET", "http://api.example.com/") },
		 try { http_request("TRACK", "http://api.example.com/") },
		 try { http_request("get", "http://api.example.com/http://169.254.169.254/latest") },
		 try { http_get("http://api.example.com/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n") },
		 try { http_get("http://api.example.com/", {"X-A" => "1\r\nHost: 169.254.169.254"}) },
		 try { http_get("http://api.example.com/", {"X-A\r\nHost" => "169.254.169.254"}) },
		 try { http_get("http://api.example.com/", {"X-A" => "a\r\n b"}) },
		 try { http_get("http://api.example.com/", {"HOST" => "169.254.169.254"}) },
		 try { http_get("http://api.example.com/", {"content-length" => "0"}) },
		 try { http_get("http://api.example.com/", {"Transfer-encoding" => "chunked"}) },
		 try { http_get("http://api.example.com/", {"Accept" => "a", "ACCEPT" => "b"}) },
		 try { http_get("http://api.example.com/", (1..500).to_h { ["X-#{_1}", "v"] }) },
		 try { http_get("http://api.example.com/", {1 => "x"}) }, # the name "1": a token
		 try { http_get("http://api.example.com/", {"X-A" => "x" * 100_000}) },
		]`).([]any)
	want := []any{
		[]any{},
		"Glovebox::UnknownToolError", "Glovebox::UnknownToolError", "Glovebox::UnknownToolError", "Glovebox::UnknownToolError",
		"Glovebox::HTTPArgumentError", "Glovebox::HTTPArgumentError", "Glovebox::HTTPArgumentError", "Glovebox::HTTPArgumentError",
		int64(200), "Glovebox::HTTPURLError",
		"Glovebox::HTTPHeaderError", "Glovebox::HTTPHeaderError", "Glovebox::HTTPHeaderError", "Glovebox::HTTPHeaderError",
		"Glovebox::HTTPHeaderError", "Glovebox::HTTPHeaderError", "Glovebox::HTTPHeaderError", "Glovebox::HTTPHeaderError",
		int64(200), "Glovebox::HTTPHeaderError",
	}
	if len(got) != len(want) {
		t.Fatalf("%#v", got)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("case %d: %#v, want %#v", i, got[i], want[i])
		}
	}
}

// TestAttackProxyEnvironment: every proxy variable, in both cases, set
// to a local proxy that fails the test if used; NO_PROXY naming nothing.
// Requests still go straight to the vetted address, over http and https.
func TestAttackProxyEnvironment(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the proxy was used: %s %s", r.Method, r.URL)
	}))
	defer proxy.Close()
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "REQUEST_METHOD"} {
		t.Setenv(v, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "direct") }))
	defer srv.Close()
	plain := newFixture(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "direct") }, Config{})
	tool, d := tlsTool(t, srv)
	for _, c := range []struct {
		tool *Tool
		url  string
	}{{plain.tool, "http://api.example.com/"}, {tool, "https://example.com/"}} {
		res, err := callTool(c.tool, "http_get", glovebox.Args{Positional: []any{c.url}})
		if err != nil || res["body"] != "direct" {
			t.Errorf("%s: %#v %v", c.url, res, err)
		}
	}
	if got := d.addresses(); len(got) != 1 || got[0] != "93.184.216.34:443" {
		t.Errorf("https dialed %v", got)
	}
}

// TestAttackDialOutlivesRequest: net/http dials with the request's
// values but neither its deadline nor its cancellation, so that a dial
// may serve a later request. A host that drops connection attempts would
// then keep a socket connecting (the kernel gives up after about two
// minutes) for every request the guest makes; the tool's dial must end
// with the request.
func TestAttackDialOutlivesRequest(t *testing.T) {
	type dialSeen struct {
		hasDeadline bool
		ctx         context.Context
	}
	seen := make(chan dialSeen, 1)
	release := make(chan struct{})
	defer close(release)
	ended := make(chan bool, 1)
	tool, err := New(Config{
		AllowHosts: []string{"blackhole.example.org"}, RequestTimeout: 100 * time.Millisecond,
		Resolver: newResolver("blackhole.example.org", []string{"93.184.216.34"}),
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			_, has := ctx.Deadline()
			seen <- dialSeen{has, ctx}
			select { // a SYN that is never answered
			case <-ctx.Done():
				ended <- true
				return nil, ctx.Err()
			case <-release:
				ended <- false
				return nil, errors.New("released by the test")
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = callTool(tool, "http_get", glovebox.Args{Positional: []any{"http://blackhole.example.org/"}})
	wantClass(t, err, ClassTimeout)
	s := <-seen
	if !s.hasDeadline {
		t.Fatal("the dial has no deadline: it outlives the request")
	}
	if !<-ended {
		t.Fatal("the dial did not end with the request")
	}
	// The eval ending (its context canceled) ends the dial too; were it
	// left running, this test would hang until the test binary's timeout.
	tool.cfg.RequestTimeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-seen
		cancel()
	}()
	_, err = tool.call(ctx, "http_get", "GET", glovebox.Args{Positional: []any{"http://blackhole.example.org/"}})
	wantClass(t, err, ClassTransport)
	if !<-ended {
		t.Fatal("the dial did not end with the eval")
	}
}

// TestAttackAnswerGrowth: the worst response for the size of its answer
// to the guest: a JSON string and header values of bytes that are not
// UTF-8, each becoming U+FFFD (three bytes). The answer stays within the
// bound Config.MaxResponseBody documents (an operator sizes
// Limits.ToolPayload by it; over it, a server could end the guest's eval
// with a status it cannot rescue), and the defaults fit the default
// payload limit.
func TestAttackAnswerGrowth(t *testing.T) {
	for _, cfg := range []Config{{}, {MaxResponseBody: 64 << 10, MaxResponseHeader: 32 << 10}} {
		f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, cfg)
		body := `["` + strings.Repeat("\xff", int(f.tool.cfg.MaxResponseBody)-4) + `"]`
		var hdr strings.Builder
		for i := 0; hdr.Len() < f.tool.cfg.MaxResponseHeader-1100; i++ {
			fmt.Fprintf(&hdr, "%x: %s\r\n", i, strings.Repeat("\xff", 1000))
		}
		f.dial.server = rawServer(t, func(c net.Conn, req *http.Request) {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", hdr.String(), len(body), body)
		})
		res, err := f.call("http_get", "http://api.example.com/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := engine.Answer(nil, res, 64)
		if err != nil {
			t.Fatal(err)
		}
		bound := 3*f.tool.cfg.MaxResponseBody + 3*int64(f.tool.cfg.MaxResponseHeader)
		if int64(len(b)) > bound {
			t.Errorf("%d-byte body, %d-byte headers: the answer is %d bytes, over the documented %d", f.tool.cfg.MaxResponseBody, f.tool.cfg.MaxResponseHeader, len(b), bound)
		}
		if cfg.MaxResponseBody == 0 && len(b) > glovebox.DefaultToolPayload {
			t.Errorf("with the defaults the answer is %d bytes, over DefaultToolPayload", len(b))
		}
	}
}

// TestAttackAllowedLiteralsDialThemselves: an allowed IP literal is
// dialed as written, never resolved (the resolver knows no such names).
func TestAttackAllowedLiteralsDialThemselves(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) }, Config{
		AllowIPLiterals: true, AllowHosts: []string{"93.184.216.34", "2606:2800:220:1::1"}, Resolver: newResolver(),
	})
	for u, want := range map[string]string{
		"http://93.184.216.34/":              "93.184.216.34:80",
		"http://[2606:2800:220:1:0::1]:443/": "[2606:2800:220:1::1]:443",
		"http://[2606:2800:220:1::1]/":       "[2606:2800:220:1::1]:80",
	} {
		res, err := f.call("http_get", u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		got := f.dial.addresses()
		if got[len(got)-1] != want {
			t.Errorf("%s dialed %v, want %s (Host %v)", u, got, want, res["body"])
		}
	}
}

// TestAttackCloudCredentialEndpoints: Azure's WireServer, 168.63.129.16,
// is a public address in no special-purpose registry, reachable from
// every Azure VM on port 80, and serves the VM's goal state (extension
// settings, certificates): a name resolving to it must be refused like
// the metadata address. The credential agents at link-local and
// unique-local addresses (EKS Pod Identity) stay refused when an
// operator trusts those networks.
func TestAttackCloudCredentialEndpoints(t *testing.T) {
	res := newResolver("wire.example.org", []string{"168.63.129.16"})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {}, Config{Resolver: res})
	_, err := f.call("http_get", "http://wire.example.org/machine?comp=goalstate")
	wantClass(t, err, ClassBlockedAddress)
	if len(f.dial.addresses()) != 0 {
		t.Fatalf("dialed %v", f.dial.addresses())
	}
	fl := newFloor([]netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fd00::/8")}, DefaultPorts)
	for _, a := range []string{"168.63.129.16", "169.254.170.23", "fd00:ec2::23", "::ffff:168.63.129.16", "64:ff9b::a83f:8110"} {
		if why := fl.check(netip.MustParseAddr(a)); !strings.Contains(why, "metadata") && !strings.Contains(why, "168.63.129.16") {
			t.Errorf("%s: %q, want a metadata refusal", a, why)
		}
	}
}

// TestAttackNoHTTP2: a server offering HTTP/2 still gets HTTP/1.1, the
// protocol whose header limit MaxResponseHeader sets and whose framing
// the response tests above cover.
func TestAttackNoHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tool, _ := tlsTool(t, srv)
	res, err := callTool(tool, "http_get", glovebox.Args{Positional: []any{"https://example.com/"}})
	if err != nil || res["body"] != "HTTP/1.1" {
		t.Fatalf("%#v %v", res, err)
	}
}

// tlsTool is a tool that reaches the TLS server srv as example.com
// (93.184.216.34), trusting srv's certificate.
func tlsTool(t *testing.T, srv *httptest.Server) (*Tool, *redirector) {
	t.Helper()
	d := &redirector{errorf: t.Errorf, server: srv.Listener.Addr().String()}
	tool, err := New(Config{AllowHosts: []string{"example.com"}, Resolver: newResolver("example.com", []string{"93.184.216.34"}), Dial: d.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tool.transport.CloseIdleConnections)
	tool.transport.TLSClientConfig.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return tool, d
}
