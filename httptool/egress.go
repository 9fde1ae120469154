package httptool

import (
	"context"
	"net"
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
	if err := t.policy.checkHost(tg); err != nil {
		return nil, err
	}
	addrs, err := t.vet(ctx, tg)
	if err != nil {
		return nil, err
	}
	hp := hostPort(tg)
	return t.dialContext(context.WithValue(ctx, pinKey{}, &pin{hostport: hp, addrs: addrs, req: ctx}), "tcp", hp)
}
