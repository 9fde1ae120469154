package httptool

import (
	"bufio"
	"bytes"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	"https://api.example.com/v1/items?q=1",
	"HTTPS://API.Example.COM./x#f",
	"http://a.b.example.org:443/",
	"http://93.184.216.34/",
	"http://[2606:2800:220:1::1]/",
	"http://2130706433/",
	"http://0177.0.0.1/",
	"http://0x7f.1/",
	"http://127.1/",
	"http://[::ffff:127.0.0.1]/",
	"http://[64:ff9b::7f00:1]/",
	"http://[2002:7f00:1::]/",
	"http://[fe80::1%25eth0]/",
	"http://user:pass@api.example.com/",
	"http://evil.com#@api.example.com/",
	`http://evil.com\@api.example.com/`,
	"http://api.example.com.evil.com/",
	"http://аpi.example.com/",
	"http://api.example.com:0443/",
	"http://api.example.com:/",
	"http:api.example.com",
	"http://api.example.com/\r\nX: y",
	"http://api.example.com/%0d%0a",
}

// looseIPv4 reports whether some resolver would take host as an IPv4
// address: inet_aton's forms, one to four parts each decimal, octal
// (leading 0) or hexadecimal (0x).
func looseIPv4(host string) bool {
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) > 4 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 0, 32); err != nil {
			return false
		}
	}
	return true
}

// FuzzURL checks the invariants of every URL the rules accept: http or
// https, no userinfo, only printable ASCII and no backslash, a host that
// is no IP address in any spelling unless literals are allowed (and then
// a canonical one), an allowed host and port, and a canonical form that
// is accepted again unchanged.
func FuzzURL(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	hosts := []string{"api.example.com", "*.example.org", "93.184.216.34", "2606:2800:220:1::1"}
	strict := &policy{hosts: hosts[:2], ports: DefaultPorts}
	literals := &policy{hosts: hosts, ipLiterals: true, ports: []int{80, 443, 8443}}
	f.Fuzz(func(t *testing.T, raw string, allowIP bool) {
		p := strict
		if allowIP {
			p = literals
		}
		tg, err := p.checkURL(raw)
		if err == nil {
			err = p.checkHost(tg)
		}
		if err != nil {
			if c := class(err); c != ClassURL && c != ClassHost {
				t.Fatalf("%q: class %q", raw, c)
			}
			return
		}
		s := tg.url.String()
		for i := 0; i < len(s); i++ {
			if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' {
				t.Fatalf("%q: accepted as %q, which holds byte %#x", raw, s, c)
			}
		}
		if strings.ContainsAny(tg.url.RequestURI(), "\r\n\x00 ") {
			t.Fatalf("%q: request target %q", raw, tg.url.RequestURI())
		}
		if tg.url.Scheme != "http" && tg.url.Scheme != "https" || tg.url.User != nil || tg.url.Opaque != "" {
			t.Fatalf("%q: accepted as %#v", raw, tg.url)
		}
		host := tg.url.Hostname()
		if host != tg.host {
			t.Fatalf("%q: host %q, target host %q", raw, host, tg.host)
		}
		ip, ipErr := netip.ParseAddr(host)
		if !p.ipLiterals && (ipErr == nil || looseIPv4(host)) {
			t.Fatalf("%q: IP-literal host %q accepted", raw, host)
		}
		if p.ipLiterals && (ipErr == nil || looseIPv4(host)) && (ipErr != nil || ip.String() != host || ip.Is4In6() || ip.Zone() != "") {
			t.Fatalf("%q: non-canonical IP-literal host %q accepted", raw, host)
		}
		if strings.ToLower(host) != host || strings.HasSuffix(host, ".") {
			t.Fatalf("%q: host %q not canonical", raw, host)
		}
		port := tg.port
		if ps := tg.url.Port(); ps != "" {
			if n, err := strconv.Atoi(ps); err != nil || n != port {
				t.Fatalf("%q: port %q, target port %d", raw, ps, port)
			}
		}
		if !slices.Contains(p.ports, port) {
			t.Fatalf("%q: port %d accepted", raw, port)
		}
		matched := false
		for _, h := range p.hosts {
			matched = matched || host == h || (strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) && len(host) > len(h)-1)
		}
		if !matched {
			t.Fatalf("%q: host %q matches no pattern", raw, host)
		}
		again, err := p.checkURL(s)
		if err != nil || again.url.String() != s {
			t.Fatalf("%q: canonical form %q not stable: %v", raw, s, err)
		}
		if u, err := url.Parse(s); err != nil || u.Hostname() != host {
			t.Fatalf("%q: canonical form %q parses differently: %v", raw, s, err)
		}
	})
}

// FuzzHeader checks that a header the rules accept is a token-named,
// allowed header that net/http writes as exactly one header line: no
// value can add a header or a request.
func FuzzHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"Accept", "application/json"},
		{"X-A", "1\r\nX-B: 2"},
		{"X-A", "a\tb"},
		{"Host", "evil.com"},
		{"x-a", "\x00"},
		{"X A", "1"},
		{"Authorization", "Bearer abc"},
		{"Transfer-Encoding", "chunked"},
		{"X-Ü", "café"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		h, err := checkHeaders(map[string]any{name: value})
		if err != nil {
			if class(err) != ClassHeader {
				t.Fatalf("%q: %q: class %q", name, value, class(err))
			}
			return
		}
		key := http.CanonicalHeaderKey(name)
		if _, bad := forbiddenHeaders[key]; bad || name == "" {
			t.Fatalf("%q accepted", name)
		}
		for i := 0; i < len(name); i++ {
			if !tokenChar(name[i]) {
				t.Fatalf("name %q accepted", name)
			}
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			t.Fatalf("value %q accepted", value)
		}
		req, _ := http.NewRequest("GET", "http://api.example.com/", nil)
		req.Header = h
		var b bytes.Buffer
		if err := req.Write(&b); err != nil {
			t.Fatalf("%q: %q: net/http refuses it: %v", name, value, err)
		}
		lines := 0
		sc := bufio.NewScanner(&b)
		for sc.Scan() {
			if sc.Text() != "" {
				lines++
			}
		}
		// The request line, Host, User-Agent and the one header.
		if want := 4; lines != want && !(key == "User-Agent" && lines == want-1) {
			t.Fatalf("%q: %q: %d lines written:\n%s", name, value, lines, b.String())
		}
	})
}
