package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/httptool"
)

// httpFlags are eval's flags for the HTTP tool; the profile's http
// section has the same fields.
type httpFlags struct {
	allow      []string
	anyHost    bool
	ipLiterals bool
	ports      []string
	trust      []string
}

func (h *httpFlags) add(f *pflag.FlagSet) {
	f.StringArrayVar(&h.allow, "http-allow", nil, "give the guest the HTTP tool (http_get, http_post, ...) for this host; *.example.com allows every name below example.com; an IP address with --http-allow-ip-literals; repeatable")
	f.BoolVar(&h.anyHost, "http-any-host", false, "give the guest the HTTP tool for every host (private, loopback and metadata addresses stay refused)")
	f.BoolVar(&h.ipLiterals, "http-allow-ip-literals", false, "let URLs name hosts by IP address (http://127.0.0.1:8080/); the address must still be allowed and pass the IP floor")
	f.StringArrayVar(&h.ports, "http-port", nil, "a port URLs may use, 1 to 65535 (default 80 and 443; repeatable; giving any replaces the default)")
	f.StringArrayVar(&h.trust, "http-trust", nil, "a network exempt from the IP floor, as a CIDR prefix such as 127.0.0.1/32 or 10.1.0.0/16 (for a development or internal server; repeatable)")
}

// over returns h's settings added to the profile's p: lists joined,
// switches on when either sets them; ports given as flags replace the
// profile's.
func (h httpFlags) over(p httpFlags) httpFlags {
	out := httpFlags{
		allow:      append(append([]string(nil), p.allow...), h.allow...),
		anyHost:    h.anyHost || p.anyHost,
		ipLiterals: h.ipLiterals || p.ipLiterals,
		ports:      p.ports,
		trust:      append(append([]string(nil), p.trust...), h.trust...),
	}
	if len(h.ports) > 0 {
		out.ports = h.ports
	}
	return out
}

// tools returns the toolset the flags ask for: nil when they ask for none.
// A bad pattern, port or prefix is a usage error.
func (h httpFlags) tools() (*glovebox.Toolset, error) {
	if len(h.allow) == 0 && !h.anyHost {
		if h.ipLiterals || len(h.ports) > 0 || len(h.trust) > 0 {
			return nil, usageError{fmt.Errorf("--http-allow-ip-literals, --http-port and --http-trust need --http-allow or --http-any-host (or http.allow / http.any_host in the profile)")}
		}
		return nil, nil
	}
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	tool, err := httptool.New(cfg)
	if err != nil {
		return nil, usageError{err}
	}
	var ts glovebox.Toolset
	if err := tool.Register(&ts); err != nil {
		return nil, err
	}
	return &ts, nil
}

// config is the httptool.Config the flags give (glovebox run's egress
// proxy uses its ports, trusted prefixes and IP-literal switch). A bad
// port or prefix is a usage error.
func (h httpFlags) config() (httptool.Config, error) {
	cfg := httptool.Config{AllowHosts: h.allow, AnyHost: h.anyHost, AllowIPLiterals: h.ipLiterals}
	for _, p := range h.ports {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 65535 {
			return cfg, usageError{fmt.Errorf("--http-port %q (or http.ports in the profile) is not a port number from 1 to 65535", p)}
		}
		cfg.Ports = append(cfg.Ports, n)
	}
	for _, t := range h.trust {
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return cfg, usageError{fmt.Errorf("--http-trust %q (or http.trust in the profile) is not a CIDR prefix such as 127.0.0.1/32 or 10.1.0.0/16", t)}
		}
		cfg.TrustedPrefixes = append(cfg.TrustedPrefixes, p)
	}
	return cfg, nil
}
