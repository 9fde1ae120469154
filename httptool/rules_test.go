package httptool

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/netguard"
)

func testPolicy(t *testing.T, cfg Config) *policy {
	t.Helper()
	if len(cfg.AllowHosts) == 0 && !cfg.AnyHost {
		cfg.AllowHosts = []string{"api.example.com", "*.example.org"}
	}
	p, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestURLRules runs each URL through the URL rules and the host allowlist
// (AllowHosts api.example.com and *.example.org). want is the class of the
// refusal, "" for an accepted URL; canon is what an accepted URL becomes.
func TestURLRules(t *testing.T) {
	cases := []struct {
		url, want, canon string
	}{
		{"https://api.example.com/v1/items?q=1", "", "https://api.example.com/v1/items?q=1"},
		{"http://api.example.com", "", "http://api.example.com"},
		{"HTTPS://API.Example.COM./x", "", "https://api.example.com/x"},             // upper case, trailing dot
		{"https://api.example.com:443/x#frag", "", "https://api.example.com:443/x"}, // fragment dropped
		{"http://api.example.com:443/", "", "http://api.example.com:443/"},
		{"https://a.example.org/", "", "https://a.example.org/"},
		{"https://a.b.example.org/", "", "https://a.b.example.org/"},
		{"https://api.example.com/%0d%0aX:%20y", "", "https://api.example.com/%0d%0aX:%20y"}, // encoded stays encoded

		// IPv4 literals in every spelling.
		{"http://127.0.0.1/", ClassURL, ""},
		{"http://2130706433/", ClassURL, ""},         // decimal
		{"http://0177.0.0.1/", ClassURL, ""},         // octal
		{"http://0x7f.0.0.1/", ClassURL, ""},         // hex part
		{"http://0x7f000001/", ClassURL, ""},         // hex whole
		{"http://127.1/", ClassURL, ""},              // short
		{"http://127.0.1/", ClassURL, ""},            // short
		{"http://169.254.169.254/", ClassURL, ""},    // metadata
		{"http://a.example.org.0x7f/", ClassURL, ""}, // ends in a number
		{"http://1.2.3.4./", ClassURL, ""},

		// IPv6 literals and IPv4-in-IPv6 forms.
		{"http://[::1]/", ClassURL, ""},
		{"http://[::ffff:127.0.0.1]/", ClassURL, ""},
		{"http://[::ffff:7f00:1]/", ClassURL, ""},
		{"http://[64:ff9b::7f00:1]/", ClassURL, ""},
		{"http://[2002:7f00:1::]/", ClassURL, ""},
		{"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", ClassURL, ""},
		{"http://[fe80::1%25eth0]/", ClassURL, ""},
		{"http://[::1/", ClassURL, ""},

		// Userinfo and parser-confusion tricks.
		{"http://user:pass@api.example.com/", ClassURL, ""},
		{"http://api.example.com@evil.com/", ClassURL, ""},
		{"http://api.example.com:80@evil.com/", ClassURL, ""},
		{"http://@api.example.com/", ClassURL, ""},
		{"http://evil.com#@api.example.com/", ClassHost, ""},
		{"http://evil.com?@api.example.com/", ClassHost, ""},
		{`http://evil.com\@api.example.com/`, ClassURL, ""},
		{`http://api.example.com\.evil.com/`, ClassURL, ""},
		{"http://%61pi.example.com/", ClassURL, ""},
		{"http://api.example.com%2f@evil.com/", ClassURL, ""},

		// Host allowlist by label suffix.
		{"http://api.example.com.evil.com/", ClassHost, ""},
		{"http://example.org/", ClassHost, ""},
		{"http://evilexample.org/", ClassHost, ""},
		{"http://example.org.evil.com/", ClassHost, ""},
		{"http://xapi.example.com/", ClassHost, ""},
		{"http://sub.api.example.com/", ClassHost, ""},
		{"http://xn--pi-7ka.example.com/", ClassHost, ""},

		// Host names.
		{"http://аpi.example.com/", ClassURL, ""}, // Cyrillic а
		{"http://api.exаmple.com/", ClassURL, ""},
		{"http://api.example.com../", ClassURL, ""},
		{"http://.api.example.com/", ClassURL, ""},
		{"http://api..example.com/", ClassURL, ""},
		{"http://api.example.com:/", "", "http://api.example.com/"},
		{"http://" + strings.Repeat("a", 64) + ".example.org/", ClassURL, ""},
		{"http:///path", ClassURL, ""},

		// Ports.
		{"http://api.example.com:8080/", ClassURL, ""},
		{"http://api.example.com:0443/", ClassURL, ""},
		{"http://api.example.com:0/", ClassURL, ""},
		{"http://api.example.com:99999/", ClassURL, ""},
		{"http://api.example.com:65616/", ClassURL, ""}, // 443 + 65536 wraps in 16 bits
		{"http://api.example.com:-1/", ClassURL, ""},
		{"http://api.example.com:22/", ClassURL, ""},

		// Schemes and forms.
		{"ftp://api.example.com/", ClassURL, ""},
		{"file:///etc/passwd", ClassURL, ""},
		{"gopher://api.example.com:70/_x", ClassURL, ""},
		{"javascript:alert(1)", ClassURL, ""},
		{"ws://api.example.com/", ClassURL, ""},
		{"//api.example.com/", ClassURL, ""},
		{"http:api.example.com", ClassURL, ""},
		{"http:/api.example.com", ClassURL, ""},
		{"api.example.com/x", ClassURL, ""},
		{"", ClassURL, ""},

		// Characters.
		{"http://api.example.com/\r\nX-Injected: 1", ClassURL, ""},
		{"http://api.example.com/\n", ClassURL, ""},
		{"http://api.example.com/\x00", ClassURL, ""},
		{"http://api.example.com/\t", ClassURL, ""},
		{"http://api.example.com/a b", ClassURL, ""},
		{"http://api.example.com/é", ClassURL, ""},
		{"http://api.example.com/" + strings.Repeat("a", MaxURL), ClassURL, ""},
	}
	p := testPolicy(t, Config{})
	for _, c := range cases {
		tg, err := p.checkURL(c.url)
		if err == nil {
			err = p.checkHost(tg)
		}
		if got := class(err); got != c.want {
			t.Errorf("%q: class %q, want %q (%v)", c.url, got, c.want, err)
			continue
		}
		if err == nil && tg.url.String() != c.canon {
			t.Errorf("%q became %q, want %q", c.url, tg.url, c.canon)
		}
		if te := (*glovebox.ToolError)(nil); errors.As(err, &te) && !strings.HasPrefix(te.Message, "http: ") {
			t.Errorf("%q: message %q does not start with http:", c.url, te.Message)
		}
	}
}

// TestIPLiterals: with AllowIPLiterals, a canonical literal passes the
// URL rules and matches itself in the allowlist; the other spellings
// stay refused.
func TestIPLiterals(t *testing.T) {
	p := testPolicy(t, Config{AllowIPLiterals: true, AllowHosts: []string{"93.184.216.34", "2606:2800:220:1::1", "api.example.com"}})
	for _, c := range []struct{ url, want string }{
		{"http://93.184.216.34/", ""},
		{"http://[2606:2800:220:1::1]/", ""},
		{"http://[2606:2800:220:1:0:0:0:1]/", ""},
		{"http://93.184.216.35/", ClassHost},
		{"http://1558501410/", ClassURL},
		{"http://093.184.216.34/", ClassURL},
		{"http://127.0.0.1/", ClassHost},
	} {
		tg, err := p.checkURL(c.url)
		if err == nil {
			err = p.checkHost(tg)
		}
		if got := class(err); got != c.want {
			t.Errorf("%q: class %q, want %q (%v)", c.url, got, c.want, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{AnyHost: true, AllowHosts: []string{"a.com"}},
		{AllowHosts: []string{"*"}},
		{AllowHosts: []string{"a.*.com"}},
		{AllowHosts: []string{"*a.com"}},
		{AllowHosts: []string{"exa mple.com"}},
		{AllowHosts: []string{"10.0.0.1"}},
		{AllowHosts: []string{"a.b.123"}},
		{AllowHosts: []string{"a.com"}, Ports: []int{0}},
		{AllowHosts: []string{"a.com"}, Ports: []int{70000}},
		{AllowHosts: []string{"a.com"}, MaxRequests: -1},
		{AllowHosts: []string{"a.com"}, MaxResponseBody: -1},
		{AllowHosts: []string{"a.com"}, TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}},
		{AllowHosts: []string{"a.com"}, TrustedPrefixes: []netip.Prefix{{}}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
	tool, err := New(Config{AllowHosts: []string{"API.Example.com.", "*.example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	if tool.cfg.MaxRequests != DefaultMaxRequests || tool.cfg.MaxTime != DefaultMaxTime || tool.cfg.RequestTimeout != DefaultRequestTimeout ||
		tool.cfg.MaxResponseBody != DefaultMaxResponseBody || tool.cfg.MaxResponseHeader != DefaultMaxResponseHeader ||
		len(tool.policy.ports) != 2 || tool.cfg.Resolver != net.DefaultResolver || tool.policy.hosts[0] != "api.example.com" {
		t.Errorf("defaults not applied: %+v %+v", tool.cfg, tool.policy)
	}
}

// TestFloor checks addresses against the IP floor.
func TestFloor(t *testing.T) {
	f := newFloor(nil, DefaultPorts)
	allowed := []string{"93.184.216.34", "8.8.8.8", "2606:2800:220:1:248:1893:25c8:1946", "2a00:1450:4001:80b::200e"}
	blocked := map[string]string{
		"127.0.0.1":       "loopback",
		"127.255.0.1":     "loopback",
		"10.0.0.1":        "private",
		"172.16.0.1":      "private",
		"172.31.255.255":  "private",
		"192.168.1.1":     "private",
		"100.64.0.1":      "carrier-grade NAT",
		"169.254.1.1":     "link-local",
		"169.254.169.254": "metadata",
		"169.254.170.2":   "metadata",
		"100.100.100.200": "metadata",
		"192.0.0.192":     "metadata",
		"fd00:ec2::254":   "metadata",
		"0.0.0.0":         "unspecified",
		"0.1.2.3":         "unspecified",
		"224.0.0.1":       "multicast",
		"239.255.255.250": "multicast",
		"255.255.255.255": "broadcast",
		"240.0.0.1":       "reserved",
		"192.0.2.1":       "reserved",
		"198.18.0.1":      "reserved",
		"::1":             "loopback",
		"::":              "unspecified",
		"fe80::1":         "link-local",
		"fc00::1":         "private",
		"fd12:3456::1":    "private",
		"ff02::1":         "multicast",
		"fec0::1":         "outside global unicast",
		"2001:db8::1":     "special-purpose",
		"fe80::1%eth0":    "scoped",
		// IPv4-in-IPv6 forms, each naming what it carries.
		"::ffff:127.0.0.1":                     "IPv4-mapped form of 127.0.0.1 (a loopback address)",
		"::ffff:10.0.0.1":                      "IPv4-mapped form of 10.0.0.1 (a private-network address)",
		"::ffff:93.184.216.34":                 "IPv4-mapped form of 93.184.216.34",
		"::127.0.0.1":                          "IPv4-compatible form of 127.0.0.1",
		"64:ff9b::7f00:1":                      "NAT64 form of 127.0.0.1",
		"64:ff9b::a9fe:a9fe":                   "NAT64 form of 169.254.169.254",
		"64:ff9b:1::a00:1":                     "local-use NAT64",
		"2002:7f00:1::1":                       "6to4 form of 127.0.0.1",
		"2002:a9fe:a9fe::":                     "6to4 form of 169.254.169.254",
		"2001:0:4136:e378:8000:63bf:80ff:fffe": "Teredo form of 127.0.0.1",
		"2001:0:4136:e378:8000:63bf:f5ff:fffe": "Teredo form of 10.0.0.1",
	}
	for _, a := range allowed {
		if why := f.check(netip.MustParseAddr(a)); why != "" {
			t.Errorf("%s refused: %s", a, why)
		}
	}
	for a, want := range blocked {
		why := f.check(netip.MustParseAddr(a))
		if !strings.Contains(why, want) {
			t.Errorf("%s: %q, want a reason containing %q", a, why, want)
		}
	}

	// Trust opens a prefix, but not the metadata endpoint inside it,
	// unless that address itself is trusted.
	trusted := newFloor([]netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fd00::/8"),
	}, DefaultPorts)
	for a, want := range map[string]string{
		"10.1.2.3":        "",
		"169.254.1.1":     "",
		"169.254.169.254": "metadata",
		"fd00:ec2::254":   "metadata",
		"fd12::1":         "",
		"192.168.1.1":     "private",
		"::ffff:10.1.2.3": "IPv4-mapped",
	} {
		if why := trusted.check(netip.MustParseAddr(a)); !strings.Contains(why, want) || (want == "" && why != "") {
			t.Errorf("trusted %s: %q, want %q", a, why, want)
		}
	}
	exact := newFloor([]netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}, DefaultPorts)
	if why := exact.check(netip.MustParseAddr("169.254.169.254")); why != "" {
		t.Errorf("an exactly trusted metadata address: %q", why)
	}
}

// TestControl: the dialer's Control refuses a blocked address or port
// before the socket connects, whatever came before it.
func TestControl(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, fl := range []*floor{
		newFloor(nil, []int{port}), // loopback refused
		newFloor([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, []int{80}), // port refused
	} {
		d := net.Dialer{Control: fl.control}
		if c, err := d.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			t.Fatal("Control let the dial through")
		} else if !strings.Contains(err.Error(), "dial refused") {
			t.Fatalf("unexpected error: %v", err)
		}
	}
	select {
	case <-accepted:
		t.Fatal("the listener accepted a connection")
	default:
	}
	fl := newFloor([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, []int{port})
	d := net.Dialer{Control: fl.control}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("trusted loopback refused: %v", err)
	}
	c.Close()
}

func TestHeaderRules(t *testing.T) {
	ok := map[string]any{"Accept": "application/json", "authorization": "Bearer x", "X-Count": int64(3), "X-Tab": "a\tb", "X-Utf8": "café"}
	h, err := checkHeaders(ok)
	if err != nil {
		t.Fatal(err)
	}
	if h.Get("Authorization") != "Bearer x" || h.Get("X-Count") != "3" || len(h) != 5 {
		t.Fatalf("%v", h)
	}
	many := map[string]any{}
	for i := range MaxHeaders + 1 {
		many["X-H"+strings.Repeat("a", i)] = "v"
	}
	for _, bad := range []map[string]any{
		{"Host": "evil.com"},
		{"host": "evil.com"},
		{"Content-Length": "5"},
		{"Transfer-Encoding": "chunked"},
		{"Connection": "close"},
		{"Upgrade": "h2c"},
		{"Accept-Encoding": "br"},
		{"X-A": "1\r\nX-B: 2"},
		{"X-A": "1\n"},
		{"X-A": "1\x00"},
		{"X-A": "\x01"},
		{"X-A": "\x7f"},
		{"X A": "1"},
		{"X-A:": "1"},
		{"X-A\r\nX-B": "1"},
		{"": "1"},
		{"Ünicode": "1"},
		{"X-A": strings.Repeat("a", MaxHeaderValue+1)},
		{"X-A": 1.5},
		{"X-A": nil},
		{"X-A": []any{"a"}},
		{"Accept": "a", "accept": "b"},
		many,
	} {
		if _, err := checkHeaders(bad); class(err) != ClassHeader {
			t.Errorf("%q: %v, want %s", bad, err, ClassHeader)
		}
	}
}

// A name resolving to one of the host's own addresses is refused even
// when that address is public (it would connect locally, past any
// firewall in front of the host), unless an operator trusts it.
func TestFloorRefusesOwnAddresses(t *testing.T) {
	public := netip.MustParseAddr("93.184.216.34") // stands in for a public interface address
	f := newFloor(nil, DefaultPorts)
	f.own = append(f.own, public)
	if why := f.check(public); why != "an address of this host itself" {
		t.Fatalf("own public address: %q", why)
	}
	if why := f.check(netip.MustParseAddr("::ffff:93.184.216.34")); why == "" {
		t.Fatal("the mapped form of an own address passed")
	}
	trusted := newFloor([]netip.Prefix{netip.MustParsePrefix("93.184.216.34/32")}, DefaultPorts)
	trusted.own = append(trusted.own, public)
	if why := trusted.check(public); why != "" {
		t.Fatalf("a trusted own address was refused: %q", why)
	}
	if len(netguard.OwnAddrs()) == 0 {
		t.Skip("no interface addresses readable here")
	}
}
