package httptool

import (
	"errors"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// MaxURL is the longest URL accepted, in bytes (8 KiB: the request-line
// size most servers accept, e.g. nginx's default 8 KiB header buffer).
const MaxURL = 8 << 10

// target is a URL that passed the URL rules.
type target struct {
	url  *url.URL   // canonical: lower-case host without a trailing dot, no fragment
	host string     // the canonical host name, or the IP literal's text
	ip   netip.Addr // set when the host is an IP literal
	port int
}

// checkURL applies the URL rules: an absolute http or https URL of at most
// MaxURL bytes, printable ASCII only (so no CR, LF, NUL, space or other
// control character), no backslash, no userinfo, no percent-encoding in
// the host, a host that is an ASCII DNS name or (when allowed) a canonical
// IP literal, and a port from the allowlist. The error is a *ToolError of
// class ClassURL saying which rule failed.
func (p *policy) checkURL(raw string) (*target, error) {
	if len(raw) > MaxURL {
		return nil, urlError("the URL is %d bytes; at most %d are accepted", len(raw), MaxURL)
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '\r' || c == '\n' || c == 0:
			return nil, urlError("the URL contains %s at byte %d; CR, LF and NUL are never allowed (percent-encode data: %%0D, %%0A, %%00)", ctlName(c), i)
		case c == ' ':
			return nil, urlError("the URL contains a space at byte %d; percent-encode it as %%20", i)
		case c < 0x20 || c == 0x7f:
			return nil, urlError("the URL contains the control character %#02x at byte %d; percent-encode it", c, i)
		case c >= 0x80:
			return nil, urlError("the URL contains a non-ASCII byte at byte %d; percent-encode the path and query (ERB::Util.url_encode), and write international host names in their xn-- (punycode) form", i)
		case c == '\\':
			return nil, urlError("the URL contains a backslash at byte %d; URL parsers disagree on what it means, so percent-encode it as %%5C", i)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		msg := err.Error()
		if errors.As(err, &ue) {
			msg = ue.Err.Error()
		}
		return nil, urlError("the URL does not parse: %s", msg)
	}
	if u.Scheme == "" {
		return nil, urlError("%q is not an absolute URL; start it with https:// or http://", truncate(raw))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, urlError("the scheme %q is not allowed; only http and https are", u.Scheme)
	}
	if u.Opaque != "" || !strings.HasPrefix(raw[len(u.Scheme)+1:], "//") {
		return nil, urlError("write the URL as %s://host/path", u.Scheme)
	}
	if u.User != nil {
		return nil, urlError("userinfo (user:password@) in the URL is not allowed; send credentials in a header such as Authorization")
	}
	authority := raw[len(u.Scheme)+3:]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	if strings.Contains(authority, "%") {
		return nil, urlError("percent-encoding in the host is not allowed; write the host name plainly")
	}
	t := &target{}
	name := u.Hostname()
	if name == "" {
		return nil, urlError("the URL has no host")
	}
	if strings.HasPrefix(u.Host, "[") {
		ip, err := netip.ParseAddr(name)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return nil, urlError("%q is not a valid IPv6 literal (zones are not allowed)", name)
		}
		t.ip = ip
	} else {
		name = strings.ToLower(name)
		if strings.HasSuffix(name, ".") {
			name = name[:len(name)-1]
		}
		if err := checkHostName(name); err != nil {
			return nil, err
		}
		labels := strings.Split(name, ".")
		if numericLabel(labels[len(labels)-1]) {
			ip, err := netip.ParseAddr(name)
			if err != nil || !ip.Is4() {
				return nil, urlError("%q is an IPv4 address in a non-standard form (decimal, octal, hexadecimal or shortened); such forms are refused, write four decimal parts (a.b.c.d) if IP literals are allowed", name)
			}
			t.ip = ip
		}
	}
	if t.ip.IsValid() {
		if !p.ipLiterals {
			return nil, urlError("IP-literal hosts (%s) are not allowed; use the service's host name (the operator can allow them: %s)", t.ip, setting("AllowIPLiterals"))
		}
		name = t.ip.String()
	}
	t.host = name

	port := u.Port()
	switch {
	case port == "" && u.Scheme == "https":
		t.port = 443
	case port == "":
		t.port = 80
	default:
		n, err := strconv.Atoi(port)
		if err != nil || port[0] == '0' || n > 65535 {
			return nil, urlError("the port %q is not a decimal number from 1 to 65535 without leading zeros", port)
		}
		t.port = n
	}
	if !slices.Contains(p.ports, t.port) {
		return nil, urlError("port %d is not allowed; allowed ports: %s (the operator sets them: %s)", t.port, portString(p.ports), setting("Ports"))
	}

	c := *u
	c.Host = name
	if t.ip.Is6() {
		c.Host = "[" + name + "]"
	}
	if port != "" {
		c.Host += ":" + port
	}
	c.Fragment, c.RawFragment = "", ""
	t.url = &c
	return t, nil
}

// checkHostName checks a lower-case host name without its trailing dot:
// at most 253 bytes, dot-separated labels of 1 to 63 letters, digits,
// hyphens and underscores.
func checkHostName(name string) error {
	if len(name) > 253 {
		return urlError("the host name is %d bytes; DNS allows at most 253", len(name))
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return urlError("the host %q has an empty label", name)
		}
		if len(l) > 63 {
			return urlError("the host %q has a label longer than 63 bytes", name)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return urlError("the host %q contains %q; host names are letters, digits, hyphens and dots", name, c)
			}
		}
	}
	return nil
}

// numericLabel reports whether a host's last label makes it an IPv4
// address to URL parsers (the WHATWG URL standard's "ends in a number"):
// all decimal digits, or 0x followed by hexadecimal digits.
func numericLabel(l string) bool {
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for i := 2; i < len(l); i++ {
			c := l[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return l != ""
}

func ctlName(c byte) string {
	switch c {
	case '\r':
		return "a carriage return (CR)"
	case '\n':
		return "a line feed (LF)"
	}
	return "a NUL byte"
}

// truncate shortens s for a message.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func urlError(format string, args ...any) error {
	return toolError(ClassURL, "http: "+format, args...)
}

// checkHost applies the host allowlist; the error is a *ToolError of
// class ClassHost.
func (p *policy) checkHost(t *target) error {
	if p.hostAllowed(t) {
		return nil
	}
	return toolError(ClassHost, "http: the host %s is not on this sandbox's allowlist (%s); only those hosts can be reached, ask the operator to add it (%s)", t.host, strings.Join(p.hosts, ", "), setting("AllowHosts"))
}

// hostAllowed reports whether the canonical host of t matches the
// allowlist. A pattern "api.example.com" matches that name; "*.example.com"
// matches any name ending in ".example.com" with at least one more label,
// never example.com itself nor example.com.evil.com. IP literals match
// only an identical pattern.
func (p *policy) hostAllowed(t *target) bool {
	if p.anyHost {
		return true
	}
	for _, pat := range p.hosts {
		if rest, ok := strings.CutPrefix(pat, "*."); ok && !t.ip.IsValid() {
			if strings.HasSuffix(t.host, "."+rest) {
				return true
			}
		} else if t.host == pat {
			return true
		}
	}
	return false
}
