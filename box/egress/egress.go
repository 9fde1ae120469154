// Package egress gives OS boxes their network allowlist through httptool:
// one policy (the host allowlist, the URL rules and the address floor that
// refuses private, loopback, link-local and cloud metadata addresses) for
// the wasm guest's HTTP functions and for a command's HTTP(S) proxy.
//
//	b, _ := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{})})
package egress

import (
	"context"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/gloveboxhq/glovebox"
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

// Labels returns a box.Network.Inspect that applies glovebox's data-flow
// policy to a command's requests, for a tool that runs commands for the
// guest: ctx is that tool call's context, and each request is checked
// with glovebox.CheckOutbound as if it were the tool's arguments, under
// the tool's SinkPolicy (a tool without one accepts no labelled kind).
// A plain http:// request is checked whole — "host", "url", "headers"
// (one "Name: value" line each) and "body"; a CONNECT tunnel (HTTPS) by
// its host only, since what the command sends inside is encrypted before
// the proxy sees it. A refused request gets 403 with the message naming
// the kind. Outside a labelled eval it lets everything through.
func Labels(ctx context.Context) func(box.EgressRequest) error {
	return func(r box.EgressRequest) error {
		parts := map[string]string{"host": r.Host}
		if !r.Tunnel {
			var h strings.Builder
			for _, k := range slices.Sorted(maps.Keys(r.Header)) {
				for _, v := range r.Header[k] {
					h.WriteString(k + ": " + v + "\n")
				}
			}
			parts["url"], parts["headers"], parts["body"] = r.URL, h.String(), string(r.Body)
		}
		return glovebox.CheckOutbound(ctx, parts)
	}
}
