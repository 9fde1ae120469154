package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds on what resources expose.
const (
	// MaxResourceBytes is the most bytes of one file a resource read
	// returns (1 MiB, the default tool payload limit); a longer file is
	// refused with a message saying so, never silently cut.
	MaxResourceBytes = 1 << 20
	// MaxListing is the most entries a directory listing shows.
	MaxListing = 1000
)

// addResources offers each mount as a read-only resource tree: the
// mount's root directory as a listed resource, and every path below it
// through a template. Paths are resolved with os.Root, so symbolic links
// cannot lead out of the mount.
func (s *Server) addResources() error {
	for _, m := range s.rt.Mounts() {
		guest := strings.TrimSuffix(m.GuestPath, "/")
		host := m.HostPath
		access := "read-only"
		if m.Writable {
			access = "writable for the programs, read-only here"
		}
		s.mcp.AddResource(&mcp.Resource{URI: "file://" + guest + "/", Name: guest, MIMEType: "text/plain",
			Description: fmt.Sprintf("Listing of %s, a folder the programs see (%s)", guest, access)},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return readMount(host, guest, req.Params.URI)
			})
		s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "file://" + guest + "/{+path}", Name: guest + " files",
			Description: fmt.Sprintf("Files under %s (read-only, at most %d bytes each); a directory reads as a listing", guest, MaxResourceBytes)},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return readMount(host, guest, req.Params.URI)
			})
	}
	return nil
}

// readMount reads uri, a file:// URI under guest, from the mount's host
// directory.
func readMount(host, guest, uri string) (*mcp.ReadResourceResult, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Host != "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	p := path.Clean(u.Path)
	rel, ok := strings.CutPrefix(p, guest)
	if !ok || (rel != "" && rel[0] != '/') {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	rel = strings.TrimPrefix(rel, "/")
	if rel == "" {
		rel = "."
	}
	root, err := os.OpenRoot(host)
	if err != nil {
		return nil, fmt.Errorf("the folder %s cannot be opened", guest)
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if st.IsDir() {
		return listing(f, uri)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if st.Size() > MaxResourceBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit for a resource read; read it from a program instead", p, st.Size(), MaxResourceBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxResourceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s failed", p)
	}
	if len(data) > MaxResourceBytes {
		return nil, fmt.Errorf("%s grew past the %d-byte limit for a resource read", p, MaxResourceBytes)
	}
	mt := mime.TypeByExtension(filepath.Ext(p))
	c := &mcp.ResourceContents{URI: uri, MIMEType: mt}
	if utf8.Valid(data) {
		if mt == "" {
			c.MIMEType = "text/plain"
		}
		c.Text = string(data)
	} else {
		if mt == "" {
			c.MIMEType = "application/octet-stream"
		}
		c.Blob = data
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}

func listing(f *os.File, uri string) (*mcp.ReadResourceResult, error) {
	ents, err := f.ReadDir(MaxListing + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errors.New("the directory cannot be listed")
	}
	var b strings.Builder
	for i, e := range ents {
		if i == MaxListing {
			fmt.Fprintf(&b, "… (more entries; listings stop at %d)\n", MaxListing)
			break
		}
		name := e.Name()
		if e.IsDir() {
			name += "/"
		} else if e.Type()&fs.ModeSymlink != 0 {
			name += "@"
		}
		b.WriteString(name + "\n")
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: b.String()}}}, nil
}
