// Package httptool gives guest code HTTP without handing it the host's
// network position: an SSRF-safe tool for a [glovebox.Toolset].
//
//	tool, err := httptool.New(httptool.Config{AllowHosts: []string{"api.example.com", "*.githubusercontent.com"}})
//	...
//	var ts glovebox.Toolset
//	err = tool.Register(&ts)
//	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
//
// The guest then calls http_get("https://api.example.com/status") and gets
// a Hash back: "status", "headers", "body" (parsed JSON, or a String) and
// "body_encoding". [Tool.Register] lists the functions; nothing else of
// the tool (budgets, validators, resolver) is reachable from the guest.
//
// # Checks
//
// Every request passes these checks in order; each failure raises its own
// Glovebox::HTTP…Error class in the guest (see the Class constants), with
// a message that says which rule failed and what to do:
//
//  1. Budgets: at most [Config].MaxRequests requests and MaxTime of
//     request time over the tool's lifetime. The host starts them afresh
//     with [Tool.Reset] between units of work.
//  2. URL rules: http or https; at most [MaxURL] bytes of printable ASCII
//     (no CR, LF, NUL, space or backslash anywhere); no userinfo; no
//     IP-literal host unless AllowIPLiterals (and never the decimal,
//     octal, hexadecimal or shortened IPv4 spellings, nor a zoned IPv6
//     address); a port from the allowlist, 80 and 443 by default. Hosts
//     are compared in lower case without a trailing dot; non-ASCII hosts
//     are refused (write them as xn-- punycode), so look-alike letters
//     cannot pass for allowed names.
//  3. Host allowlist by label suffix: "*.example.com" matches
//     a.example.com, never example.com.evil.com. AnyHost skips it.
//  4. Header rules: names are RFC 9110 tokens; Host, Content-Length,
//     Transfer-Encoding, Connection and the other connection-level headers
//     are refused; values hold no CR, LF or other control character.
//  5. The IP floor: the name is resolved once and every address it
//     resolves to must pass, or the request is refused; the connection is
//     then made to one of those vetted addresses, never to a second
//     resolution, so a rebinding resolver cannot swap it. Refused:
//     loopback, private, link-local, carrier-grade NAT, multicast,
//     unspecified, reserved and documentation ranges, everything outside
//     IPv6 global unicast, cloud metadata endpoints, and IPv4 addresses in
//     IPv6 clothing (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo).
//     The dialer's Control checks the address once more just before the
//     socket connects. TrustedPrefixes exempt networks an operator means
//     the guest to reach. The decision for ordinary addresses is
//     code.dny.dev/ssrf's (the IANA special-purpose registries).
//  6. The response: the body is capped at MaxResponseBody while it
//     streams, after gzip decompression; the headers at MaxResponseHeader;
//     the whole request at RequestTimeout. Redirects are returned to the
//     guest, never followed.
//
// Environment proxy settings (HTTP_PROXY and the like) are ignored, TLS
// certificates are verified against the host name, and the connection
// speaks HTTP/1.1. [Config].Audit sees every attempted request and its
// outcome, host-side.
//
// Messages never tell the guest which address a name resolved to, so the
// tool cannot be used to map the host's internal network; the audit
// entry's error carries it.
//
// # Rescuing
//
// Every class above is a Glovebox::ToolError subclass and exists from the
// start of every eval, so guest code can rescue one specific kind of
// refusal (rescue Glovebox::HTTPBlockedAddressError) or all of them
// (rescue Glovebox::ToolError).
package httptool
