package embed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"sync"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/e2b"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/box/gvisor"
	"github.com/gloveboxhq/glovebox/httptool"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// runRequest is a run op's command: Glovebox::Box#run without an
// executor, on this host's OS sandbox.
type runRequest struct {
	// Backend is "bwrap", "gvisor", "e2b" (with E2B), or "" for the
	// first of bubblewrap and gVisor this host has.
	Backend string             `json:"backend,omitempty"`
	Command clientwire.Command `json:"command"`
	// Credentials are environment values the parent resolved; they go
	// into the command's environment only, never into an answer or a
	// log line.
	Credentials map[string]string `json:"credentials,omitempty"`
	// E2B is the hosted backend's settings (Backend "e2b" only).
	E2B *e2bSpec `json:"e2b,omitempty"`
}

// e2bSpec is Glovebox::Box.hosted(:e2b, ...)'s settings for one run.
type e2bSpec struct {
	// APIURL is E2B's control API; "" is E2B's public one
	// (e2bPublicAPI). https, or plain http to a loopback address.
	APIURL string `json:"api_url,omitempty"`
	// APIKey is the key the parent resolved for this run: sent only in
	// E2B's X-API-Key header, never in an answer or a log line.
	APIKey string `json:"api_key"`
	// Template is the sandbox template; "" is "base".
	Template string `json:"template,omitempty"`
	// EnvdURL, when set, is every sandbox's envd base URL (a
	// self-hosted or test service) instead of E2B's per-sandbox one.
	EnvdURL string `json:"envd_url,omitempty"`
}

// e2bPublicAPI is E2B's public control API (its documentation's base
// URL), as the CLI's --e2b-url default.
const e2bPublicAPI = "https://api.e2b.dev"

// box makes the E2B box for one run, checking its URLs.
func (e *e2bSpec) box() (box.Box, error) {
	if e.APIKey == "" {
		return nil, fmt.Errorf("%w: e2b: no api_key", box.ErrInvalidCommand)
	}
	api := e.APIURL
	if api == "" {
		api = e2bPublicAPI
	}
	for _, u := range []struct{ name, url string }{{"api_url", api}, {"envd_url", e.EnvdURL}} {
		if u.url == "" {
			continue
		}
		if err := checkServiceURL(u.url); err != nil {
			return nil, fmt.Errorf("%w: e2b: %s %q: %v", box.ErrInvalidCommand, u.name, u.url, err)
		}
	}
	cfg := e2b.Config{APIURL: strings.TrimSuffix(api, "/"), Template: e.Template,
		APIKey: func(context.Context) (string, error) { return e.APIKey, nil }}
	if e.EnvdURL != "" {
		envd := strings.TrimSuffix(e.EnvdURL, "/")
		cfg.EnvdURL = func(string) string { return envd }
	}
	return e2b.New(cfg)
}

// checkServiceURL accepts an https URL, or plain http to a loopback
// address (a development server): a key never crosses a network in the
// clear.
func checkServiceURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return errors.New("not an absolute URL")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		h := u.Hostname()
		if ip, err := netip.ParseAddr(h); (err == nil && ip.IsLoopback()) || h == "localhost" {
			return nil
		}
		return errors.New("plain http only to a loopback address; use https")
	}
	return errors.New("want https")
}

// runRecord is a run's answer, in an executor record's shape.
type runRecord struct {
	Key     string             `json:"key"`
	State   string             `json:"state"`
	Backend string             `json:"backend"`
	Result  *clientwire.Result `json:"result"`
}

// run runs one command on this host's OS sandbox.
func (s *server) run(ch *channel, q *request) {
	if q.Run == nil {
		ch.k.refuse(refusef(codeBadRequest, "run: missing"))
		return
	}
	var b box.Box
	var err error
	switch {
	case q.Run.Backend == "e2b" && q.Run.E2B != nil:
		b, err = q.Run.E2B.box()
		if err != nil {
			ch.k.refuse(refusef(codeInvalidCommand, "%v", err))
			return
		}
	case q.Run.Backend == "e2b" || q.Run.E2B != nil:
		ch.k.refuse(refusef(codeBadRequest, "run: backend \"e2b\" and its e2b settings go together"))
		return
	default:
		b, err = s.boxes.get(q.Run.Backend)
	}
	if err != nil {
		ch.k.refuse(refusef(codeUnavailable, "%v", err))
		return
	}
	cmd := q.Run.Command.Box()
	if len(q.Run.Credentials) > 0 {
		cmd.Credentials = map[string]func(context.Context) (string, error){}
		for k, v := range q.Run.Credentials {
			cmd.Credentials[k] = func(context.Context) (string, error) { return v, nil }
		}
	}
	ctx, cancel := context.WithCancel(ch.ctx)
	defer cancel()
	var out *outputSink // the command's output, coalesced (outputDelay)
	if q.Stream {
		out = &outputSink{k: ch.k, cancel: cancel}
		defer out.close()
		cmd.Stream = func(stream int, p []byte) {
			t := byte(frameStdout)
			if stream == 2 {
				t = frameStderr
			}
			out.write(t, p)
		}
	}
	untrack := s.track(q.Key, cancel)
	unhang := ch.watchHangup(cancel) // a parent thread gone mid-run kills the command
	res, err := b.Run(ctx, cmd)
	unhang()
	out.close() // before the answer: every O and E frame precedes it
	untrack()   // before the answer: a cancel that follows it finds nothing
	if err != nil {
		code := codeBackend
		switch {
		case errors.Is(err, box.ErrInvalidCommand):
			code = codeInvalidCommand
		case errors.Is(err, box.ErrUnsupported):
			code = codeUnsupported
		case errors.Is(err, box.ErrUnavailable):
			code = codeUnavailable
		}
		ch.k.refuse(refusef(code, "%v", err))
		return
	}
	p := b.Posture()
	ch.k.reply(runRecord{Key: q.Key, State: "completed", Backend: p.Backend, Result: clientwire.FromBoxResult(res, p.Isolation)})
}

// boxes are this host's OS sandboxes, made on first use.
type boxes struct {
	mu   sync.Mutex
	made map[string]box.Box
}

// get returns the box named ("bwrap", "gvisor"), or for "" the first of
// them this host has; the error names what is missing for each.
func (b *boxes) get(name string) (box.Box, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.made == nil {
		b.made = map[string]box.Box{}
	}
	names := []string{name}
	switch name {
	case "":
		names = []string{"bwrap", "gvisor"}
	case "bwrap", "gvisor":
	default:
		return nil, fmt.Errorf("backend %q: want bwrap or gvisor (embedded boxes run on this host; an executor runs them elsewhere)", name)
	}
	var why []string
	for _, n := range names {
		if bx := b.made[n]; bx != nil {
			return bx, nil
		}
		var bx box.Box
		var err error
		egr := egress.HTTPTool(httptool.Config{})
		if n == "bwrap" {
			bx, err = bwrap.New(bwrap.Config{Egress: egr})
		} else {
			bx, err = gvisor.New(gvisor.Config{Egress: egr})
		}
		if err == nil {
			b.made[n] = bx
			return bx, nil
		}
		why = append(why, err.Error())
	}
	return nil, fmt.Errorf("no OS sandbox for commands on this host (%s): install bubblewrap (apt-get install bubblewrap) "+
		"or gVisor's runsc, or give Glovebox::Box an executor: to run commands on another host", strings.Join(why, "; "))
}
