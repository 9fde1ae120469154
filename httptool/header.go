package httptool

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Limits on the headers a guest may send. Our choice: generous for API
// calls, far below what would let a guest make the host build large
// requests (servers commonly accept 8 KiB per field and 100 fields,
// Apache's LimitRequestFieldSize and LimitRequestFields defaults).
const (
	MaxHeaders     = 100
	MaxHeaderValue = 8 << 10
)

// forbiddenHeaders are the request headers a guest may not set: they
// control the connection or the message framing rather than the request,
// so a guest could use them to smuggle a second request or switch
// protocols. Accept-Encoding is the tool's own: it negotiates gzip so that
// it can cap the body after decompression.
var forbiddenHeaders = map[string]string{
	"Host":              "the host comes from the URL",
	"Content-Length":    "the tool sets it from the body",
	"Transfer-Encoding": "the tool frames the body itself",
	"Connection":        "the tool manages connections",
	"Keep-Alive":        "the tool manages connections",
	"Proxy-Connection":  "the tool manages connections",
	"Upgrade":           "protocol switches are not supported",
	"Te":                "the tool frames the body itself",
	"Trailer":           "the tool frames the body itself",
	"Accept-Encoding":   "the tool negotiates compression itself, to cap the body after decompression",
}

// checkHeaders applies the header rules to the guest's headers (a Hash of
// name to String or Integer): at most MaxHeaders, names that are RFC 9110
// tokens, none of forbiddenHeaders, no name given twice in any case,
// values of at most MaxHeaderValue bytes with no CR, LF, NUL or other
// control character but tab. The error is a *ToolError of class
// ClassHeader.
func checkHeaders(in map[string]any) (http.Header, error) {
	if len(in) > MaxHeaders {
		return nil, headerError("%d headers given; at most %d are allowed", len(in), MaxHeaders)
	}
	names := make([]string, 0, len(in))
	for k := range in {
		names = append(names, k)
	}
	sort.Strings(names) // deterministic: the first bad header is always the same
	h := make(http.Header, len(in))
	for _, name := range names {
		if name == "" {
			return nil, headerError("a header name is empty")
		}
		for i := 0; i < len(name); i++ {
			if !tokenChar(name[i]) {
				return nil, headerError("the header name %q contains %q; names are letters, digits and !#$%%&'*+-.^_`|~ only", truncate(name), name[i])
			}
		}
		key := http.CanonicalHeaderKey(name)
		if why, bad := forbiddenHeaders[key]; bad {
			return nil, headerError("the header %s may not be set: %s", key, why)
		}
		if _, dup := h[key]; dup {
			return nil, headerError("the header %s is given twice (names are case-insensitive); join the values with \", \"", key)
		}
		var v string
		switch x := in[name].(type) {
		case string:
			v = x
		case int64:
			v = strconv.FormatInt(x, 10)
		default:
			return nil, headerError("the value of header %s is %s; give a String", key, guestType(x))
		}
		if len(v) > MaxHeaderValue {
			return nil, headerError("the value of header %s is %d bytes; at most %d are allowed", key, len(v), MaxHeaderValue)
		}
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c == '\r' || c == '\n' || c == 0 {
				return nil, headerError("the value of header %s contains %s; CR, LF and NUL are never allowed in header values", key, ctlName(c))
			}
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return nil, headerError("the value of header %s contains the control character %#02x", key, c)
			}
		}
		h[key] = []string{strings.Trim(v, " \t")}
	}
	return h, nil
}

// tokenChar reports whether c may appear in an RFC 9110 token (§5.6.2).
func tokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func headerError(format string, args ...any) error {
	return toolError(ClassHeader, "http: "+format, args...)
}
