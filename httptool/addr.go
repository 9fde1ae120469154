package httptool

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"syscall"

	"code.dny.dev/ssrf"

	"github.com/gloveboxhq/glovebox/internal/netguard"
)

// Prefixes whose addresses carry an IPv4 address inside an IPv6 one.
var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052
	nat64LocalPrefix = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")      // RFC 3056
	teredoPrefix     = netip.MustParsePrefix("2001::/32")      // RFC 4380
	compatPrefix     = netip.MustParsePrefix("::/96")          // RFC 4291 §2.5.5.1, deprecated
	cgnatPrefix      = netip.MustParsePrefix("100.64.0.0/10")  // RFC 6598, shared address space
)

// floor is the IP floor: the addresses the tool never dials. The decision
// for ordinary addresses is code.dny.dev/ssrf's (the IANA special-purpose
// registries, everything outside IPv6 global unicast); floor adds the
// metadata endpoints (internal/netguard; refused even inside a trusted
// prefix, unless that prefix is the single address), zoned addresses and named reasons for the
// IPv4-in-IPv6 forms, so a message can say what an address really is.
type floor struct {
	trusted []netip.Prefix
	guard   *ssrf.Guardian
	// own are the host's own interface addresses: a name resolving to
	// one connects locally, past any firewall in front of the host,
	// even when the address is public.
	own []netip.Addr
}

func newFloor(trusted []netip.Prefix, ports []int) *floor {
	var v4, v6 []netip.Prefix
	for _, p := range trusted {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	ps := make([]uint16, len(ports))
	for i, p := range ports {
		ps[i] = uint16(p)
	}
	return &floor{
		own:     netguard.OwnAddrs(),
		trusted: trusted,
		guard: ssrf.New(
			ssrf.WithAllowedV4Prefixes(v4...),
			ssrf.WithAllowedV6Prefixes(v6...),
			ssrf.WithPorts(ps...),
		),
	}
}

// check returns "" when ip may be dialed, else the reason it may not, in
// words for a message ("a loopback address").
func (f *floor) check(ip netip.Addr) string {
	if !ip.IsValid() {
		return "not a valid address"
	}
	if ip.Zone() != "" {
		return "a scoped (zoned) IPv6 address"
	}
	if netguard.Metadata(ip) {
		for _, p := range f.trusted {
			if p.IsSingleIP() && p.Addr() == ip {
				return ""
			}
		}
		return "a cloud metadata endpoint"
	}
	trusted := false
	for _, p := range f.trusted {
		if p.Contains(ip) {
			trusted = true
			break
		}
	}
	form, v4 := embeddedIPv4(ip)
	switch {
	case form != "" && !trusted && v4.IsValid():
		return fmt.Sprintf("the %s form of %s (%s); IPv4-in-IPv6 forms are never dialed", form, v4, kind(v4))
	case form != "" && !trusted:
		return fmt.Sprintf("a %s address; IPv4-in-IPv6 forms are never dialed", form)
	case form != "" && v4.IsValid():
		// A trusted translation prefix (NAT64 for an IPv6-only host, say)
		// trusts the way through the gateway, not every IPv4 address
		// behind it: the address it carries must pass on its own, so the
		// metadata endpoints and untrusted private networks stay out.
		if why := f.check(v4); why != "" {
			return fmt.Sprintf("the %s form of %s (%s)", form, v4, why)
		}
		return ""
	}
	if f.guard.SafeAddr(ip) != nil {
		return kind(ip)
	}
	if !trusted && slices.Contains(f.own, ip.Unmap()) {
		return "an address of this host itself"
	}
	return ""
}

// control is the net.Dialer Control function: the last check, on the
// address the socket is about to connect to.
func (f *floor) control(network, address string, c syscall.RawConn) error {
	if err := f.guard.Safe(network, address, c); err != nil {
		return fmt.Errorf("httptool: dial refused: %w", err)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("httptool: dial refused: %w", err)
	}
	if why := f.check(ap.Addr()); why != "" {
		return fmt.Errorf("httptool: dial refused: %s is %s", ap.Addr(), why)
	}
	return nil
}

// embeddedIPv4 reports whether ip is an IPv6 form that carries an IPv4
// address, naming the form and returning the IPv4 address where the form
// fixes its place.
func embeddedIPv4(ip netip.Addr) (form string, v4 netip.Addr) {
	if !ip.Is6() {
		return "", netip.Addr{}
	}
	b := ip.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case ip.Is4In6():
		return "IPv4-mapped", last
	case nat64Prefix.Contains(ip):
		return "NAT64", last
	case nat64LocalPrefix.Contains(ip):
		return "local-use NAT64", netip.Addr{}
	case sixToFourPrefix.Contains(ip):
		return "6to4", netip.AddrFrom4([4]byte(b[2:6]))
	case teredoPrefix.Contains(ip):
		// The client's address is stored inverted in the last 32 bits.
		return "Teredo", netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
	case compatPrefix.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		return "IPv4-compatible", last
	}
	return "", netip.Addr{}
}

// kind names the class of a refused address, for messages.
func kind(ip netip.Addr) string {
	switch {
	case netguard.Metadata(ip):
		return "a cloud metadata endpoint"
	case ip.IsUnspecified() || (ip.Is4() && ip.As4()[0] == 0):
		return "an unspecified (this-network) address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate():
		return "a private-network address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast():
		return "a multicast address"
	case cgnatPrefix.Contains(ip):
		return "a carrier-grade NAT (shared) address"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	case ip.Is4():
		return "a special-purpose or reserved IPv4 address"
	}
	if form, v4 := embeddedIPv4(ip); form != "" && v4.IsValid() {
		return "the " + form + " form of " + v4.String()
	}
	return "a special-purpose IPv6 address or one outside global unicast"
}

// portString formats a port list for messages: "80, 443".
func portString(ports []int) string {
	s := ""
	for i, p := range ports {
		if i > 0 {
			s += ", "
		}
		s += strconv.Itoa(p)
	}
	return s
}
