package main

import (
	"github.com/spf13/pflag"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/httptool"
)

// httpFlags are eval's flags for the HTTP tool.
type httpFlags struct {
	allow   []string
	anyHost bool
}

func (h *httpFlags) add(f *pflag.FlagSet) {
	f.StringArrayVar(&h.allow, "http-allow", nil, "give the guest the HTTP tool (http_get, http_post, ...) for this host; *.example.com allows every name below example.com; repeatable")
	f.BoolVar(&h.anyHost, "http-any-host", false, "give the guest the HTTP tool for every host (private, loopback and metadata addresses stay refused)")
}

// tools returns the toolset the flags ask for: nil when they ask for none.
// A bad pattern is a usage error.
func (h *httpFlags) tools() (*glovebox.Toolset, error) {
	if len(h.allow) == 0 && !h.anyHost {
		return nil, nil
	}
	tool, err := httptool.New(httptool.Config{AllowHosts: h.allow, AnyHost: h.anyHost})
	if err != nil {
		return nil, usageError{err}
	}
	var ts glovebox.Toolset
	if err := tool.Register(&ts); err != nil {
		return nil, err
	}
	return &ts, nil
}
