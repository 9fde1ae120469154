package mcptools

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Defaults of the Config fields that cap what a server sends (see
// [Config].MaxMessageBytes).
const (
	// DefaultMaxMessageBytes bounds one message from a server: 16 MiB,
	// the go-sdk's own default for a stdio line and an SSE event, room
	// for 16 times glovebox's default tool payload (1 MiB) and a result
	// of the largest payload most hosts allow.
	DefaultMaxMessageBytes = 16 << 20
	// DefaultMaxResponseBytes bounds everything one HTTP response carries
	// (64 MiB: a call's result with all its progress and log events).
	DefaultMaxResponseBytes = 64 << 20
	// DefaultMaxListTools bounds the tools of one server's listing
	// (1,000; servers in use offer tens).
	DefaultMaxListTools = 1000
	// DefaultMaxListBytes bounds what a server sends while it lists its
	// tools (16 MiB: a thousand tools with schemas of 16 KiB each).
	DefaultMaxListBytes = 16 << 20
	// maxListPages bounds the pages of one listing: a listing cut into
	// more than 100 pages is a listing that does not end.
	maxListPages = 100
)

// guard caps what one session reads from its server, counts it, and
// remembers the first cap passed: the session is then closed (it is
// restarted at the next call), every later request of it is refused, and
// its calls fail with that error.
type guard struct {
	server   string
	cfg      *Config
	received atomic.Int64 // bytes read from the server
	mu       sync.Mutex
	err      error
	onTrip   func() // closes the session; called once, after err is set
}

// capError is the error of a server that sent more than a cap allows.
type capError struct {
	server, what, knob string
	cap                int64
}

func (e *capError) Error() string {
	knob := "mcptools.Config." + e.knob
	if e.knob == "MaxMessageBytes" {
		knob += ", or glovebox's --mcp-max-message"
	}
	return fmt.Sprintf("server %q sent %s of more than %d bytes, the cap (%s); the host stopped reading it and closed the connection (the server is restarted at the next call)", e.server, e.what, e.cap, knob)
}

// trip records that the server passed the cap knob of cap bytes with
// what, and returns the error (the first one recorded).
func (g *guard) trip(what, knob string, cap int64) error {
	g.mu.Lock()
	first := g.err == nil
	if first {
		g.err = &capError{server: g.server, what: what, knob: knob, cap: cap}
	}
	err := g.err
	g.mu.Unlock()
	if first && g.onTrip != nil {
		g.onTrip()
	}
	return err
}

// tripped returns the cap error recorded, or nil. A nil guard has none.
func (g *guard) tripped() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// capTransport caps the response bodies of an HTTP server: an SSE stream
// by event (MaxMessageBytes) and, but for the standalone GET stream that
// lives as long as the session, in all (MaxResponseBytes); any other body
// (JSON, an error page) at MaxMessageBytes. A session that passed a cap
// sends nothing more.
type capTransport struct {
	g  *guard
	rt http.RoundTripper
}

func (t capTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := t.g.tripped(); err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, err
	}
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	msg := int64(t.g.cfg.MaxMessageBytes)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		total := t.g.cfg.MaxResponseBytes
		if r.Method == http.MethodGet {
			total = -1
		}
		resp.Body = &sseCap{rc: resp.Body, g: t.g, event: msg, total: total}
	} else {
		resp.Body = &bodyCap{rc: resp.Body, g: t.g, max: msg}
	}
	return resp, nil
}

// bodyCap passes at most max bytes of a body, tripping the guard at more.
type bodyCap struct {
	rc  io.ReadCloser
	g   *guard
	max int64
	n   int64
}

func (b *bodyCap) Read(p []byte) (int, error) {
	if int64(len(p)) > b.max-b.n+1 {
		p = p[:b.max-b.n+1]
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	b.g.received.Add(int64(n))
	if b.n > b.max {
		return n - int(b.n-b.max), b.g.trip("a response body", "MaxMessageBytes", b.max)
	}
	return n, err
}

func (b *bodyCap) Close() error { return b.rc.Close() }

// sseCap passes an SSE stream while each event (the bytes up to a blank
// line, so each line too) stays within event bytes and the stream within
// total (negative: no bound), tripping the guard when one does not.
type sseCap struct {
	rc           io.ReadCloser
	g            *guard
	event, total int64
	inEvent, n   int64
	lineText     bool // the line so far has a byte other than '\r'
}

func (s *sseCap) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	s.n += int64(n)
	s.g.received.Add(int64(n))
	for b := p[:n]; len(b) > 0; {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.inEvent += int64(len(b))
			s.lineText = s.lineText || len(bytes.Trim(b, "\r")) > 0
			break
		}
		s.inEvent += int64(i + 1)
		if !s.lineText && len(bytes.Trim(b[:i], "\r")) == 0 {
			s.inEvent = 0 // a blank line ends the event
		}
		s.lineText = false
		b = b[i+1:]
	}
	switch {
	case s.inEvent > s.event:
		return n, s.g.trip("an SSE event", "MaxMessageBytes", s.event)
	case s.total >= 0 && s.n > s.total:
		return n, s.g.trip("an SSE stream answering one request", "MaxResponseBytes", s.total)
	}
	return n, err
}

func (s *sseCap) Close() error { return s.rc.Close() }

// scrubber takes a server's URL out of messages: its secret parts
// (userinfo, query, fragment, path) for the host's errors and logs, and
// for the guest everything of it but the server's name (its host and
// address too), besides any other URL and IP address.
type scrubber struct {
	forHostR, forGuestR *strings.Replacer
}

var (
	anyURL  = regexp.MustCompile(`(?i)\b(?:https?|wss?)://[^\s"'<>]+`)
	anyAddr = regexp.MustCompile(`\[[0-9A-Fa-f:.%]+\](?::\d+)?|\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b`)
)

// newScrubber lists the pieces of s's URL: short ones (under 4 bytes,
// where a secret hardly fits and an ordinary word easily does) are taken
// out only as part of a longer one.
func newScrubber(s Server) *scrubber {
	var secret, host []string
	add := func(list *[]string, min int, ps ...string) {
		for _, p := range ps {
			if len(p) >= min {
				*list = append(*list, p)
			}
		}
	}
	if u, err := url.Parse(s.URL); err == nil && s.URL != "" {
		add(&secret, 1, s.URL, u.String(), u.Redacted())
		if u.User != nil {
			pw, _ := u.User.Password()
			// As net/http prints it, the password hidden (url.Error).
			add(&secret, 1, strings.Replace(u.Redacted(), ":xxxxx@", ":***@", 1))
			add(&secret, 4, u.User.String(), u.User.Username(), pw, url.QueryEscape(u.User.Username()), url.QueryEscape(pw))
		}
		add(&secret, 2, u.RawQuery, u.Query().Encode(), u.Fragment, u.EscapedFragment(), u.EscapedPath())
		if u.Path != "/" {
			add(&secret, 2, u.Path)
		}
		for k, vs := range u.Query() {
			for _, v := range vs {
				add(&secret, 4, v, url.QueryEscape(v), k+"="+v, k+"="+url.QueryEscape(v))
			}
		}
		for _, seg := range strings.Split(u.Path, "/") {
			add(&secret, 4, seg, url.PathEscape(seg))
		}
		add(&host, 1, u.Host, u.Hostname())
	} else if s.URL != "" {
		add(&secret, 1, s.URL)
	}
	replacer := func(label func(secret bool) string) *strings.Replacer {
		type piece struct {
			s      string
			secret bool
		}
		var ps []piece
		for i, l := range [][]string{secret, host} {
			for _, p := range l {
				ps = append(ps, piece{p, i == 0})
			}
		}
		// Longest first: a Replacer tries its pairs in order at each
		// place, so a URL goes whole before its parts.
		sort.SliceStable(ps, func(i, j int) bool { return len(ps[i].s) > len(ps[j].s) })
		var pairs []string
		for _, p := range ps {
			if l := label(p.secret); l != "" {
				pairs = append(pairs, p.s, l)
			}
		}
		return strings.NewReplacer(pairs...)
	}
	return &scrubber{
		forHostR: replacer(func(secret bool) string {
			if secret {
				return "<" + s.Name + "'s URL>"
			}
			return ""
		}),
		forGuestR: replacer(func(secret bool) string {
			if secret {
				return "<" + s.Name + "'s URL>"
			}
			return "<" + s.Name + "'s address>"
		}),
	}
}

// forHost takes the secret parts of the server's URL out of msg: its
// userinfo, query, fragment and path.
func (sc *scrubber) forHost(msg string) string { return sc.forHostR.Replace(msg) }

// forGuest takes everything of the server's URL out of msg but the
// server's name, and every other URL and IP address.
func (sc *scrubber) forGuest(msg string) string {
	msg = sc.forGuestR.Replace(msg)
	msg = anyURL.ReplaceAllString(msg, "<a URL>")
	return anyAddr.ReplaceAllString(msg, "<an address>")
}
