package mcpserver

import (
	"context"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultWatchInterval is how often the files behind subscribed mount
// resources are checked for changes (2 seconds: a person editing a file
// sees the update promptly, and a stat per subscribed file costs
// microseconds).
const DefaultWatchInterval = 2 * time.Second

// watcher tracks the resources clients subscribed to (resources/subscribe,
// MCP 2025-11-25 and older) and tells them when a mounted file changes.
// The SDK keeps who subscribed to what; this keeps what to check.
type watcher struct {
	s        *Server
	interval time.Duration
	mu       sync.Mutex
	watched  map[string]*watchedFile // by URI
	stop     chan struct{}
	started  bool
}

// watchedFile is a subscribed mount file and what it was when last seen.
type watchedFile struct {
	file     watchTarget // the zero value for a resource that is not a file
	subs     int
	mod      time.Time
	size     int64
	exists   bool
	lastSeen bool
}

// subscribe accepts a subscription to a resource the server serves: a
// path under a mount (watched for changes) or a named resource (its
// program is loaded once and its answer depends only on its URI, so no
// update is ever sent for it). Any other URI is refused as not found.
func (w *watcher) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	host, ok := w.s.resourceHost(uri)
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.watched[uri]
	if f == nil {
		f = &watchedFile{file: host}
		f.look()
		w.watched[uri] = f
	}
	f.subs++
	if !w.started && host.root != "" {
		w.started = true
		go w.loop()
	}
	return nil
}

func (w *watcher) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.watched[req.Params.URI]; f != nil {
		if f.subs--; f.subs <= 0 {
			delete(w.watched, req.Params.URI)
		}
	}
	return nil
}

// look records the file's modification time and size.
func (f *watchedFile) look() (changed bool) {
	if f.file.root == "" {
		return false
	}
	st, err := f.file.stat()
	exists := err == nil
	var mod time.Time
	var size int64
	if exists {
		mod, size = st.ModTime(), st.Size()
	}
	changed = f.lastSeen && (exists != f.exists || !mod.Equal(f.mod) || size != f.size)
	f.exists, f.mod, f.size, f.lastSeen = exists, mod, size, true
	return changed
}

func (w *watcher) loop() {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		var changed []string
		w.mu.Lock()
		for uri, f := range w.watched {
			if f.look() {
				changed = append(changed, uri)
			}
		}
		w.mu.Unlock()
		for _, uri := range changed {
			_ = w.s.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
	}
}

// close stops the watching.
func (w *watcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		close(w.stop)
		w.started = false
	}
}

// watchTarget is the file a subscribed resource is: a path under a
// mount's host directory, looked up beneath it (as reads are, so that a
// symbolic link cannot lead out). The zero value is no file.
type watchTarget struct{ root, rel string }

// stat returns the file's information.
func (t watchTarget) stat() (os.FileInfo, error) {
	r, err := os.OpenRoot(t.root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Stat(t.rel)
}

// resourceHost says whether uri is a resource the server serves and, for
// a path under a mount, which file it is (the zero watchTarget for a
// named resource).
func (s *Server) resourceHost(uri string) (watchTarget, bool) {
	for _, p := range s.programs {
		if p.Kind != "resource" {
			continue
		}
		// A template's URIs share the text before its first variable.
		if lead, _, _ := strings.Cut(p.URITemplate, "{"); p.URI == uri || (p.URITemplate != "" && strings.HasPrefix(uri, lead)) {
			return watchTarget{}, true
		}
	}
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Host != "" {
		return watchTarget{}, false
	}
	p := path.Clean(u.Path)
	for _, m := range s.rt.Mounts() {
		guest := strings.TrimSuffix(m.GuestPath, "/")
		rel, ok := strings.CutPrefix(p, guest)
		if ok && (rel == "" || rel[0] == '/') {
			rel = strings.TrimPrefix(rel, "/")
			if rel == "" {
				rel = "."
			}
			return watchTarget{root: m.HostPath, rel: filepath.FromSlash(rel)}, true
		}
	}
	return watchTarget{}, false
}
