package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// mcpFlags are the flags that bind MCP servers' tools into the sandbox.
type mcpFlags struct {
	servers []string // NAME=COMMAND ARGS...
	urls    []string // NAME=URL
	env     []string // [SERVER:]NAME[=VALUE]
	roots   []string // URIs or paths
	labels  []string // SERVER[/TOOL]=KIND:PATH|KIND:emails
	sinks   []string // SERVER/TOOL=KIND,...
	log     bool
}

func (m *mcpFlags) add(f *pflag.FlagSet) {
	f.StringArrayVar(&m.servers, "mcp-server", nil, `bind every tool of a stdio MCP server: NAME=COMMAND ARGS... (split at spaces, no quoting), e.g. "mem=npx -y @modelcontextprotocol/server-memory"; repeatable`)
	f.StringArrayVar(&m.urls, "mcp-url", nil, "bind every tool of a Streamable HTTP MCP server: NAME=URL; repeatable")
	f.StringArrayVar(&m.env, "mcp-env", nil, `give stdio MCP servers a variable: NAME passes glovebox's value, NAME=VALUE sets one; "SERVER:" in front gives it to that server only. Servers get no other variables but PATH, HOME, USER, LOGNAME, SHELL, TMPDIR, TZ, TERM and the locale; repeatable`)
	f.StringArrayVar(&m.roots, "mcp-root", nil, "a root the MCP servers are told of when they ask (roots/list): a URI, or a path (made a file:// URI); repeatable; none by default")
	f.StringArrayVar(&m.labels, "mcp-label", nil, `label sensitive values in a bound server's results (docs/dataflow.md): SERVER=KIND:PATH for every tool, SERVER/TOOL=KIND:PATH for one (its MCP name); PATH names fields of the result as the guest gets it (text, structured.email), or "emails" for every address in it; the model then sees tokens, and tools refuse the values; repeatable`)
	f.StringArrayVar(&m.sinks, "mcp-sink", nil, `let a bound server's tool receive labelled kinds: SERVER/TOOL=KIND[,KIND...] (TOOL "*" for every tool of the server); without it a tool accepts none once anything is labelled; repeatable`)
	f.BoolVar(&m.log, "log-mcp", false, "copy the MCP servers' stderr to glovebox's stderr")
}

// mcpProfileServer is one entry of a profile's mcp_servers section: a
// command (with env, pass_env and dir) or a url (with headers; $VAR and
// ${VAR} in header values are taken from glovebox's environment, so
// secrets need not be written in the file). A command gets only the
// variables mcptools.BaseEnv names, the pass_env names (glovebox's
// values) and env.
type mcpProfileServer struct {
	Command []string          `yaml:"command"`
	Env     map[string]string `yaml:"env"`
	PassEnv []string          `yaml:"pass_env"`
	Dir     string            `yaml:"dir"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
}

// servers parses the flags and the profile's section (profile first; a
// flag replaces the profile's server of the same name).
func (m *mcpFlags) parse(profile string) ([]mcptools.Server, error) {
	byName := map[string]mcptools.Server{}
	var order []string
	put := func(s mcptools.Server) {
		if _, ok := byName[s.Name]; !ok {
			order = append(order, s.Name)
		}
		byName[s.Name] = s
	}
	if profile != "" {
		b, err := os.ReadFile(profile)
		if err != nil {
			return nil, fmt.Errorf("--profile: %w", err)
		}
		var pf struct {
			MCP map[string]mcpProfileServer `yaml:"mcp_servers"`
		}
		if err := yaml.Unmarshal(b, &pf); err != nil {
			return nil, fmt.Errorf("--profile %s: mcp_servers: %v", profile, err)
		}
		names := make([]string, 0, len(pf.MCP))
		for n := range pf.MCP {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			p := pf.MCP[n]
			s := mcptools.Server{Name: n, Command: p.Command, Dir: p.Dir, URL: p.URL, PassEnv: p.PassEnv}
			for _, k := range sortedKeys(p.Env) {
				s.Env = append(s.Env, k+"="+p.Env[k])
			}
			for k, v := range p.Headers {
				if s.Header == nil {
					s.Header = map[string][]string{}
				}
				s.Header[k] = []string{os.ExpandEnv(v)}
			}
			put(s)
		}
	}
	for _, spec := range m.servers {
		name, cmd, ok := strings.Cut(spec, "=")
		if !ok || len(strings.Fields(cmd)) == 0 {
			return nil, fmt.Errorf("--mcp-server %q: want NAME=COMMAND ARGS...", spec)
		}
		put(mcptools.Server{Name: name, Command: strings.Fields(cmd)})
	}
	for _, spec := range m.urls {
		name, u, ok := strings.Cut(spec, "=")
		if !ok || u == "" {
			return nil, fmt.Errorf("--mcp-url %q: want NAME=URL", spec)
		}
		put(mcptools.Server{Name: name, URL: u})
	}
	for _, spec := range m.env {
		server, v := "", spec
		if i := strings.IndexAny(spec, ":="); i >= 0 && spec[i] == ':' {
			server, v = spec[:i], spec[i+1:]
			if s, ok := byName[server]; !ok || len(s.Command) == 0 {
				return nil, fmt.Errorf("--mcp-env %q: no stdio server is named %q", spec, server)
			}
		}
		name, _, set := strings.Cut(v, "=")
		if name == "" {
			return nil, fmt.Errorf("--mcp-env %q: want [SERVER:]NAME or [SERVER:]NAME=VALUE", spec)
		}
		for _, n := range order {
			s := byName[n]
			if len(s.Command) == 0 || (server != "" && n != server) {
				continue
			}
			if set {
				s.Env = append(s.Env, v)
			} else {
				s.PassEnv = append(s.PassEnv, name)
			}
			byName[n] = s
		}
	}
	if err := m.policy(byName); err != nil {
		return nil, err
	}
	out := make([]mcptools.Server, 0, len(order))
	for _, n := range order {
		out = append(out, byName[n])
	}
	return out, nil
}

// policy applies --mcp-label and --mcp-sink to the servers they name.
func (m *mcpFlags) policy(byName map[string]mcptools.Server) error {
	target := func(flag, spec string) (mcptools.Server, string, string, error) {
		where, what, ok := strings.Cut(spec, "=")
		server, tool, _ := strings.Cut(where, "/")
		s, found := byName[server]
		switch {
		case !ok || what == "":
			return s, "", "", fmt.Errorf("%s %q: want SERVER[/TOOL]=...", flag, spec)
		case !found:
			return s, "", "", fmt.Errorf("%s %q: no server is named %q (name it with --mcp-server or --mcp-url first)", flag, spec, server)
		}
		return s, tool, what, nil
	}
	for _, spec := range m.labels {
		s, tool, what, err := target("--mcp-label", spec)
		if err != nil {
			return err
		}
		kind, path, ok := strings.Cut(what, ":")
		l := glovebox.Label{Kind: glovebox.Kind(kind), Path: path}
		if path == "emails" {
			l = glovebox.Label{Kind: glovebox.Kind(kind), Find: glovebox.FindEmails}
		}
		if !ok || path == "" {
			return fmt.Errorf("--mcp-label %q: want SERVER[/TOOL]=KIND:PATH or KIND:emails", spec)
		}
		if tool == "" {
			s.Labels = append(s.Labels, l)
		} else {
			s.ToolLabels = maps.Clone(s.ToolLabels)
			if s.ToolLabels == nil {
				s.ToolLabels = map[string][]glovebox.Label{}
			}
			s.ToolLabels[tool] = append(s.ToolLabels[tool], l)
		}
		byName[s.Name] = s
	}
	for _, spec := range m.sinks {
		s, tool, what, err := target("--mcp-sink", spec)
		if err != nil {
			return err
		}
		if tool == "" {
			return fmt.Errorf("--mcp-sink %q: want SERVER/TOOL=KIND[,KIND...] (TOOL * for every tool)", spec)
		}
		var p glovebox.SinkPolicy
		for _, k := range strings.Split(what, ",") {
			p.Accepts = append(p.Accepts, glovebox.Kind(strings.TrimSpace(k)))
		}
		s.Sinks = maps.Clone(s.Sinks)
		if s.Sinks == nil {
			s.Sinks = map[string]glovebox.SinkPolicy{}
		}
		s.Sinks[tool] = p
		byName[s.Name] = s
	}
	return nil
}

// mcpRoots turns --mcp-root values into roots: a value with a scheme
// ("file:///srv", "https://...") is used as is, anything else is a path,
// made absolute and a file:// URI.
func mcpRoots(specs []string) ([]mcptools.Root, error) {
	var out []mcptools.Root
	for _, s := range specs {
		if u, err := url.Parse(s); err == nil && len(u.Scheme) > 1 {
			out = append(out, mcptools.Root{URI: s})
			continue
		}
		abs, err := filepath.Abs(s)
		if err != nil || s == "" {
			return nil, fmt.Errorf("--mcp-root %q: want a URI or a path", s)
		}
		out = append(out, mcptools.Root{URI: (&url.URL{Scheme: "file", Path: abs}).String(), Name: filepath.Base(abs)})
	}
	return out, nil
}

// mcpBindings are the servers this process started; closeMCP stops them.
var (
	mcpMu       sync.Mutex
	mcpBindings []*mcptools.Binding
)

// bind starts the servers the flags and profile name and adds their tools
// to tools (nil means none yet). A bad spec is a usage error; a server
// that fails to start is an error that says which.
func (m *mcpFlags) bind(tools *glovebox.Toolset, profile string) (*glovebox.Toolset, error) {
	servers, err := m.parse(profile)
	if err != nil {
		return nil, usageError{err}
	}
	if len(servers) == 0 {
		return tools, nil
	}
	if tools == nil {
		tools = &glovebox.Toolset{}
	}
	level := slog.LevelWarn
	if m.log {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	roots, err := mcpRoots(m.roots)
	if err != nil {
		return nil, usageError{err}
	}
	b, err := mcptools.Bind(context.Background(), tools, mcptools.Config{Logger: log, Roots: roots}, servers...)
	if err != nil {
		return nil, err
	}
	mcpMu.Lock()
	mcpBindings = append(mcpBindings, b)
	mcpMu.Unlock()
	return tools, nil
}

// closeMCP stops every MCP server this process started.
func closeMCP() {
	mcpMu.Lock()
	defer mcpMu.Unlock()
	for _, b := range mcpBindings {
		b.Close()
	}
	mcpBindings = nil
}

// mcpNotes describes the servers bound so far for a model (the server-notes
// section of a code-mode description: pass as codemode.Config.Servers).
func mcpNotes() []codemode.Server {
	mcpMu.Lock()
	defer mcpMu.Unlock()
	var out []codemode.Server
	for _, b := range mcpBindings {
		out = append(out, b.Notes()...)
	}
	return out
}
