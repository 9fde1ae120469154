package netguard

import (
	"net/netip"
	"testing"
)

func TestMetadata(t *testing.T) {
	for _, s := range []string{"169.254.169.254", "168.63.129.16", "fd00:ec2::254", "100.100.100.200"} {
		if !Metadata(netip.MustParseAddr(s)) {
			t.Errorf("%s is a metadata endpoint", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "168.63.129.17", "127.0.0.1"} {
		if Metadata(netip.MustParseAddr(s)) {
			t.Errorf("%s is not a metadata endpoint", s)
		}
	}
}
