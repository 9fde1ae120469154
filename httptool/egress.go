package httptool

import (
	"context"
	"net"
	"strings"
)

// DialURL connects to the host and port of rawURL under exactly the rules
// a request through the tool meets: the URL rules, the host allowlist and
// the address floor (every resolved address checked, only checked
// addresses dialled, the connection's peer checked again). It is what an
// OS box's egress proxy dials through (package box/egress), so the two
// share one policy. It does not count against MaxRequests or MaxTime and
// calls no audit hook. Errors are *glovebox.ToolError values (class
// ClassURL or ClassHost) or refusals whose messages name no address.
func (t *Tool) DialURL(ctx context.Context, rawURL string) (net.Conn, error) {
	tg, err := t.policy.checkURL(rawURL)
	if err != nil {
		return nil, err
	}
	if !t.policy.hostAllowed(tg) {
		// The proxy's allowlist is the command's network, set apart from
		// the HTTP tool's: name the knobs that set it.
		return nil, toolError(ClassHost, "http: the host %s is not on this command's network allowlist (%s); only those hosts can be reached, ask the operator to add it (box.Network.Allow, glovebox run flag --network allow:HOST, profile key box.network)", tg.host, strings.Join(t.policy.hosts, ", "))
	}
	addrs, err := t.vet(ctx, tg)
	if err != nil {
		return nil, err
	}
	hp := hostPort(tg)
	return t.dialContext(context.WithValue(ctx, pinKey{}, &pin{hostport: hp, addrs: addrs, req: ctx}), "tcp", hp)
}
