// Package egress gives OS boxes their network allowlist through httptool:
// one policy (the host allowlist, the URL rules and the address floor that
// refuses private, loopback, link-local and cloud metadata addresses) for
// the wasm guest's HTTP functions and for a command's HTTP(S) proxy.
//
//	b, _ := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{})})
package egress

import (
	"context"
	"net"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/httptool"
)

// HTTPTool returns the box.EgressFunc a box calls per run with the Command's
// allowlist: it makes an httptool.Tool from base with AllowHosts set to
// hosts and returns the Tool's DialURL and its Close. base's other fields
// (TrustedPrefixes, Ports, Resolver, Dial) apply as they do to the tool.
func HTTPTool(base httptool.Config) box.EgressFunc {
	return func(hosts []string) (func(context.Context, string) (net.Conn, error), func(), error) {
		cfg := base
		cfg.AllowHosts = hosts
		t, err := httptool.New(cfg)
		if err != nil {
			return nil, nil, err
		}
		return t.DialURL, t.Close, nil
	}
}
