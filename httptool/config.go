package httptool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Defaults for zero Config fields. The numbers are our choices, sized for
// a guest calling JSON APIs:
//   - DefaultMaxRequests: 100 requests over the tool's lifetime, enough to
//     walk a paged API, few enough that a runaway loop cannot flood one;
//   - DefaultMaxTime: 60 s of requests over the tool's lifetime;
//   - DefaultRequestTimeout: 10 s, glovebox.DefaultTimeout, so one request
//     may use at most a default eval's time;
//   - DefaultMaxResponseBody: 256 KiB after decompression, a quarter of
//     glovebox.DefaultToolPayload: the response must cross back within
//     that payload, and its encoding can grow a body and the headers
//     threefold (a byte that is not UTF-8, inside a JSON string or a
//     header value, becomes the three bytes of U+FFFD): about 960 KiB;
//   - DefaultMaxResponseHeader: 64 KiB of response headers, twice the
//     header buffer space common servers accept (nginx: 4 × 8 KiB).
const (
	DefaultMaxRequests       = 100
	DefaultMaxTime           = 60 * time.Second
	DefaultRequestTimeout    = 10 * time.Second
	DefaultMaxResponseBody   = 256 << 10
	DefaultMaxResponseHeader = 64 << 10
)

// DefaultPorts are the ports allowed when Config.Ports is empty.
var DefaultPorts = []int{80, 443}

// ErrInvalidConfig wraps every rejection of a [Config] by [New].
var ErrInvalidConfig = errors.New("httptool: invalid config")

// The guest exception classes, each Glovebox::<Class>, a subclass of
// Glovebox::ToolError (see [glovebox.ToolError]). A tool error's Class is
// one of these; errors.As finds the *glovebox.ToolError in the error an
// [AuditEntry] carries.
const (
	// ClassArgument: the guest called a function with arguments of the
	// wrong shape (method not a String, headers not a Hash, a body that
	// has no JSON form, an unknown keyword).
	ClassArgument = "HTTPArgumentError"
	// ClassBudget: the tool's lifetime request or time budget is spent
	// (MaxRequests, MaxTime), or ran out during the request.
	ClassBudget = "HTTPBudgetError"
	// ClassURL: the URL broke a URL rule (scheme, userinfo, IP literal,
	// port, characters, length).
	ClassURL = "HTTPURLError"
	// ClassHost: the host is not on the allowlist.
	ClassHost = "HTTPHostError"
	// ClassHeader: a request header broke a header rule.
	ClassHeader = "HTTPHeaderError"
	// ClassBlockedAddress: the host is, or resolves to, an address the IP
	// floor refuses (loopback, private, link-local, metadata, ...).
	ClassBlockedAddress = "HTTPBlockedAddressError"
	// ClassResponseTooLarge: the response body or headers exceeded
	// MaxResponseBody or MaxResponseHeader.
	ClassResponseTooLarge = "HTTPResponseTooLargeError"
	// ClassTimeout: the request took longer than RequestTimeout.
	ClassTimeout = "HTTPTimeoutError"
	// ClassTransport: the request failed on the way (name resolution,
	// connection, TLS, a malformed response).
	ClassTransport = "HTTPError"
)

// Resolver resolves host names to addresses; *net.Resolver implements it.
// LookupNetIP is called with network "ip" and a lower-case host name
// without its trailing dot.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a [Tool]. Lists are copied by [New]; zero fields take
// the defaults listed with them, and negative numbers are invalid.
type Config struct {
	// AllowHosts are the host names the guest may reach: "api.example.com"
	// matches that name only, "*.example.com" any name below example.com
	// (a.example.com, a.b.example.com) but neither example.com itself nor
	// example.com.evil.com. Matching ignores case and a trailing dot.
	// With AllowIPLiterals, an IP address written as the URL writes it
	// (1.2.3.4, or 2001:db8::1 without brackets) matches itself.
	AllowHosts []string
	// AnyHost skips the host allowlist (AllowHosts must then be empty).
	// Every other rule, the IP floor included, still holds.
	AnyHost bool
	// AllowIPLiterals lets URLs name hosts by IP address (dotted-decimal
	// IPv4 or bracketed IPv6; other IPv4 spellings and IPv4-in-IPv6 forms
	// stay refused). The zero value refuses them.
	AllowIPLiterals bool
	// Ports are the ports a URL may use, 1 to 65535. Zero means
	// DefaultPorts (80 and 443).
	Ports []int
	// TrustedPrefixes are networks exempt from the IP floor, for an
	// operator who means the guest to reach an internal service (together
	// with an AllowHosts entry for its name). Cloud metadata addresses
	// stay refused unless a prefix is exactly that one address. A trusted
	// prefix of IPv4-in-IPv6 addresses (such as NAT64's 64:ff9b::/96)
	// trusts the translation, not the IPv4 addresses it carries: each
	// must pass the floor as itself (or be trusted as well).
	TrustedPrefixes []netip.Prefix
	// MaxRequests is the most requests over the tool's lifetime (until
	// [Tool.Reset]); refused requests count too. Zero means
	// DefaultMaxRequests.
	MaxRequests int
	// MaxTime is the most wall-clock time requests may take together over
	// the tool's lifetime; a request is cut off when it runs out.
	// Concurrent requests (evals sharing the tool) may together overrun
	// it by at most one RequestTimeout each. Zero means DefaultMaxTime.
	MaxTime time.Duration
	// RequestTimeout bounds one request, from name resolution to the last
	// byte of the body. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxResponseBody caps a response body in bytes, counted after
	// decompression while it streams in. The response crosses back to the
	// guest within the Runtime's Limits.ToolPayload, and its encoding may
	// take up to 3 × MaxResponseBody + 3 × MaxResponseHeader bytes; a
	// larger answer raises Glovebox::ToolPayloadError in the guest. Zero
	// means DefaultMaxResponseBody.
	MaxResponseBody int64
	// MaxResponseHeader caps the response headers in bytes. Zero means
	// DefaultMaxResponseHeader.
	MaxResponseHeader int
	// Audit, if set, is called host-side once for every request the guest
	// attempts, refused ones included, after its outcome is known. It runs
	// on the eval's goroutine: keep it quick.
	Audit func(ctx context.Context, e AuditEntry)
	// Resolver resolves host names. Zero means net.DefaultResolver.
	// Answers in IPv4-mapped form are taken as the IPv4 address they map,
	// which is what a socket would reach.
	Resolver Resolver
	// Dial makes the final connection, to a vetted "ip:port" on network
	// "tcp". Zero means a net.Dialer whose Control checks the address
	// again just before the socket connects; a Dial of your own replaces
	// that last check (every address it is given has passed the floor).
	// Tests inject it to reach a local server while the policy sees a
	// public address.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// AuditEntry describes one request the guest attempted.
type AuditEntry struct {
	// Time is when the request started.
	Time time.Time
	// Method and URL are as the guest gave them (URL cut to MaxURL bytes).
	Method, URL string
	// Host is the canonical host name (lower case, no trailing dot), or
	// "" when the URL was refused before it was known.
	Host string
	// Addr is the address connected to; zero when no connection was made.
	Addr netip.AddrPort
	// Status is the HTTP status code; 0 when there was no response.
	Status int
	// BodyBytes is the response body's size after decompression.
	BodyBytes int64
	// Duration is how long the request took.
	Duration time.Duration
	// Err is nil for a request that got a response (whatever its status);
	// otherwise it wraps a *glovebox.ToolError whose Class is one of the
	// Class constants, and may carry host-only detail (a resolved
	// address) that the guest's message leaves out.
	Err error
}

// policy is a validated Config's request rules.
type policy struct {
	hosts      []string // lower case, no trailing dot
	anyHost    bool
	ipLiterals bool
	ports      []int
}

// settings names each Config field a refusal can point to, with the
// glovebox CLI flag and profile key that set it, so that whoever reads a
// message (an operator, or a model passing it on) finds the knob in the
// form they use.
var settings = map[string][2]string{
	"AllowHosts":      {"--http-allow", "http.allow"},
	"AnyHost":         {"--http-any-host", "http.any_host"},
	"AllowIPLiterals": {"--http-allow-ip-literals", "http.allow_ip_literals"},
	"Ports":           {"--http-port", "http.ports"},
	"TrustedPrefixes": {"--http-trust", "http.trust"},
}

// setting is how messages name a Config field: "httptool.Config.Ports,
// glovebox flag --http-port, profile key http.ports".
func setting(field string) string {
	s := settings[field]
	return fmt.Sprintf("httptool.Config.%s, glovebox flag %s, profile key %s", field, s[0], s[1])
}

// validate checks cfg, fills in the defaults and returns the policy.
func (cfg *Config) validate() (*policy, error) {
	bad := func(format string, args ...any) (*policy, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	p := &policy{anyHost: cfg.AnyHost, ipLiterals: cfg.AllowIPLiterals}
	if cfg.AnyHost && len(cfg.AllowHosts) > 0 {
		return bad("AnyHost and AllowHosts are exclusive (%s; %s)", setting("AnyHost"), setting("AllowHosts"))
	}
	if !cfg.AnyHost && len(cfg.AllowHosts) == 0 {
		return bad("no host is allowed: set AllowHosts, or AnyHost to allow every host the IP floor permits")
	}
	for _, h := range cfg.AllowHosts {
		pat := strings.TrimSuffix(strings.ToLower(h), ".")
		if ip, err := netip.ParseAddr(pat); err == nil {
			if !cfg.AllowIPLiterals {
				return bad("AllowHosts names the IP address %q, but AllowIPLiterals is off (%s)", h, setting("AllowIPLiterals"))
			}
			if ip.Zone() != "" || pat != ip.String() {
				return bad("AllowHosts: write %q as %s", h, ip.WithZone(""))
			}
			p.hosts = append(p.hosts, pat)
			continue
		}
		name := strings.TrimPrefix(pat, "*.")
		if strings.Contains(name, "*") {
			return bad("AllowHosts: %q: a wildcard is allowed only as a whole first label (*.example.com); use AnyHost to allow every host", h)
		}
		if err := checkHostName(name); err != nil {
			return bad("AllowHosts: %q: %v", h, err)
		}
		if labels := strings.Split(name, "."); numericLabel(labels[len(labels)-1]) {
			return bad("AllowHosts: %q ends in a number, so URL parsers read it as an IPv4 address", h)
		}
		p.hosts = append(p.hosts, pat)
	}
	if len(cfg.Ports) == 0 {
		cfg.Ports = DefaultPorts
	}
	for _, port := range cfg.Ports {
		if port < 1 || port > 65535 {
			return bad("port %d is not in 1-65535", port)
		}
	}
	p.ports = append([]int(nil), cfg.Ports...)
	for _, pf := range cfg.TrustedPrefixes {
		if !pf.IsValid() || pf.Addr().Zone() != "" || pf != pf.Masked() {
			return bad("TrustedPrefixes: %v is not a valid masked prefix (such as 10.1.0.0/16; %s)", pf, setting("TrustedPrefixes"))
		}
	}
	cfg.TrustedPrefixes = append([]netip.Prefix(nil), cfg.TrustedPrefixes...)
	for _, n := range []struct {
		name string
		v    int64
		def  int64
		set  func(int64)
	}{
		{"MaxRequests", int64(cfg.MaxRequests), DefaultMaxRequests, func(v int64) { cfg.MaxRequests = int(v) }},
		{"MaxTime", int64(cfg.MaxTime), int64(DefaultMaxTime), func(v int64) { cfg.MaxTime = time.Duration(v) }},
		{"RequestTimeout", int64(cfg.RequestTimeout), int64(DefaultRequestTimeout), func(v int64) { cfg.RequestTimeout = time.Duration(v) }},
		{"MaxResponseBody", cfg.MaxResponseBody, DefaultMaxResponseBody, func(v int64) { cfg.MaxResponseBody = v }},
		{"MaxResponseHeader", int64(cfg.MaxResponseHeader), DefaultMaxResponseHeader, func(v int64) { cfg.MaxResponseHeader = int(v) }},
	} {
		switch {
		case n.v < 0:
			return bad("%s is negative", n.name)
		case n.v == 0:
			n.set(n.def)
		}
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	return p, nil
}

// toolError makes the error a guest sees as Glovebox::<class>.
func toolError(class, format string, args ...any) error {
	return &glovebox.ToolError{Class: class, Message: fmt.Sprintf(format, args...)}
}
