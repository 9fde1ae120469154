// Package netguard holds the addresses every outbound dial of glovebox
// refuses beyond code.dny.dev/ssrf's special-purpose registries: the
// cloud instance-metadata and credential endpoints, some of which are
// public addresses ssrf lets through, and the host's own interface
// addresses. httptool (the guest's HTTP tool) and mcptools (OAuth
// requests on a bound server's behalf) share it.
package netguard

import (
	"net"
	"net/netip"
	"slices"
)

// OwnAddrs lists the addresses of the host's network interfaces,
// unmapped and without zones (nil if they cannot be listed). A name that
// resolves to one connects to this host itself, past any firewall in
// front of it, even when the address is public; so a dial on a guest's
// or a remote server's say-so refuses them like loopback. It reads the
// interfaces on every call (they change as the host's network does).
func OwnAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out
}

// metadata are the endpoints: AWS, GCP, Azure, OpenStack and
// DigitalOcean (169.254.169.254), AWS ECS task metadata (169.254.170.2),
// AWS's IPv6 endpoint (fd00:ec2::254), the EKS Pod Identity agent
// (169.254.170.23, fd00:ec2::23), Azure's WireServer (168.63.129.16, a
// public address in no special-purpose registry that every Azure VM
// reaches on port 80 and that serves the VM's extension settings and
// certificates), Alibaba Cloud (100.100.100.200) and Oracle Cloud
// (192.0.0.192), as each provider documents them.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("169.254.170.23"),
	netip.MustParseAddr("fd00:ec2::23"),
	netip.MustParseAddr("168.63.129.16"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("192.0.0.192"),
}

// Metadata reports whether ip (unmapped, without a zone) is a cloud
// metadata or credential endpoint.
func Metadata(ip netip.Addr) bool {
	return slices.Contains(metadata, ip)
}
