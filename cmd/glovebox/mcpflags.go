package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// mcpFlags are the flags that bind MCP servers' tools into the sandbox.
type mcpFlags struct {
	servers []string // NAME=COMMAND ARGS...
	urls    []string // NAME=URL
	env     []string // [SERVER:]NAME[=VALUE]
	roots   []string // URIs or paths
	proto   []string // [NAME=]REVISION
	oauth   []string // NAME[,key=value...]
	open    string   // the command that opens an authorization URL
	elicit  string   // refuse, decline, accept or client ("": client when forward is set, else refuse)
	// forward passes a server's elicitation on to glovebox mcp's own
	// client (--mcp-elicit client); nil outside glovebox mcp.
	forward func(context.Context, string, *mcp.ElicitParams) (*mcp.ElicitResult, error)
	labels  []string // SERVER[/TOOL]=KIND:PATH|KIND:emails
	sinks   []string // SERVER/TOOL=KIND,...
	log     bool
	maxMsg  string // --mcp-max-message: a size, "" for the default
}

func (m *mcpFlags) add(f *pflag.FlagSet) {
	f.StringArrayVar(&m.servers, "mcp-server", nil, `bind every tool of a stdio MCP server: NAME=COMMAND ARGS... (split at spaces, no quoting), e.g. "mem=npx -y @modelcontextprotocol/server-memory"; repeatable`)
	f.StringArrayVar(&m.urls, "mcp-url", nil, "bind every tool of a Streamable HTTP MCP server: NAME=URL; repeatable")
	f.StringArrayVar(&m.env, "mcp-env", nil, `give stdio MCP servers a variable: NAME passes glovebox's value, NAME=VALUE sets one; "SERVER:" in front gives it to that server only. Servers get no other variables but PATH, HOME, USER, LOGNAME, SHELL, TMPDIR, TZ, TERM and the locale; repeatable`)
	f.StringArrayVar(&m.roots, "mcp-root", nil, "a root the MCP servers are told of when they ask (roots/list): a URI, or a path (made a file:// URI); repeatable; none by default")
	f.StringArrayVar(&m.labels, "mcp-label", nil, `label sensitive values in a bound server's results (docs/dataflow.md): SERVER=KIND:PATH for every tool, SERVER/TOOL=KIND:PATH for one (its MCP name); PATH names fields of the result as the guest gets it (text, structured.email), or "emails" for every address in it; the model then sees tokens, and tools refuse the values; repeatable`)
	f.StringArrayVar(&m.sinks, "mcp-sink", nil, `let a bound server's tool receive labelled kinds: SERVER/TOOL=KIND[,KIND...] (TOOL "*" for every tool of the server); without it a tool accepts none once anything is labelled; repeatable`)
	f.BoolVar(&m.log, "log-mcp", false, "copy the MCP servers' stderr to glovebox's stderr")
	f.StringVar(&m.maxMsg, "mcp-max-message", "", "the largest message glovebox reads from a bound MCP server (a JSON body, an SSE event, a stdio line), e.g. 64MiB; a server that sends more fails the call and is restarted (default 16MiB; what one answer carries in all is four times this, at least 64MiB)")
	f.StringArrayVar(&m.proto, "mcp-protocol", nil, `the MCP revision to ask a server for: [NAME=]REVISION (2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05); without NAME, every server; default: 2026-07-28, falling back to 2025-11-25's initialize; repeatable`)
	f.StringArrayVar(&m.oauth, "mcp-oauth", nil, `authorize an --mcp-url server with OAuth 2.1 when it asks: NAME[,client_id=ID][,client_secret_env=VAR][,client_metadata=URL][,redirect=URL] (a pre-registered client, its secret read from $VAR, a client ID metadata document, a loopback redirect URL; default: dynamic registration, redirect to an ephemeral 127.0.0.1 port); tokens stay in glovebox's memory; repeatable`)
	f.StringVar(&m.open, "mcp-oauth-open", "", `a command that opens the authorization URL (appended as its last argument), e.g. xdg-open; default: print the URL on stderr and wait for the redirect`)
	f.StringVar(&m.elicit, "mcp-elicit", "", `how to answer an MCP server's elicitation (a question during a tool call): refuse (do not offer elicitation), decline, accept (with the defaults its schema gives), or client (glovebox mcp only: ask glovebox mcp's own MCP client); default: client under glovebox mcp, refuse elsewhere`)
}

// mcpOAuth parses one --mcp-oauth value.
func mcpOAuth(spec string) (string, *mcptools.OAuth, error) {
	parts := strings.Split(spec, ",")
	o := &mcptools.OAuth{}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return "", nil, fmt.Errorf("--mcp-oauth %q: %q: want key=value", spec, kv)
		}
		switch k {
		case "client_id":
			o.ClientID = v
		case "client_secret_env":
			sec, ok := os.LookupEnv(v)
			if !ok || sec == "" {
				return "", nil, fmt.Errorf("--mcp-oauth %q: $%s is not set", spec, v)
			}
			o.ClientSecret = sec
		case "client_metadata":
			o.ClientMetadataURL = v
		case "redirect":
			o.RedirectURL = v
		default:
			return "", nil, fmt.Errorf("--mcp-oauth %q: unknown key %q (want client_id, client_secret_env, client_metadata or redirect)", spec, k)
		}
	}
	if o.ClientSecret != "" && o.ClientID == "" {
		return "", nil, fmt.Errorf("--mcp-oauth %q: client_secret_env needs client_id", spec)
	}
	return parts[0], o, nil
}

// elicitAnswer is the --mcp-elicit answerer, with forward the one that
// asks glovebox mcp's client (nil elsewhere); nil refuses.
func elicitAnswer(mode string, forward func(context.Context, string, *mcp.ElicitParams) (*mcp.ElicitResult, error)) (func(context.Context, string, *mcp.ElicitParams) (*mcp.ElicitResult, error), error) {
	switch mode {
	case "":
		return forward, nil
	case "client":
		if forward == nil {
			return nil, fmt.Errorf("--mcp-elicit client: only glovebox mcp has an MCP client to ask")
		}
		return forward, nil
	case "refuse":
		return nil, nil
	case "decline":
		return func(context.Context, string, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}, nil
	case "accept":
		return mcptools.AcceptDefaults, nil
	}
	return nil, fmt.Errorf("--mcp-elicit %q: want refuse, decline, accept or client", mode)
}

// openCommand returns the OAuth.Open that runs --mcp-oauth-open's
// command with the URL appended, not waiting for it to exit.
func openCommand(command string) func(context.Context, string) error {
	argv := strings.Fields(command)
	if len(argv) == 0 {
		return nil
	}
	return func(_ context.Context, u string) error {
		c := exec.Command(argv[0], append(argv[1:], u)...)
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		if err := spawn.Start(c); err != nil {
			return err
		}
		go c.Wait()
		return nil
	}
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
	// Protocol is the MCP revision to ask for (--mcp-protocol); OAuth
	// the --mcp-oauth settings of a url server, which it turns on.
	Protocol string `yaml:"protocol"`
	OAuth    *struct {
		ClientID        string `yaml:"client_id"`
		ClientSecretEnv string `yaml:"client_secret_env"`
		ClientMetadata  string `yaml:"client_metadata"`
		Redirect        string `yaml:"redirect"`
	} `yaml:"oauth"`
}

// profileServers turns a profile's mcp_servers section into servers,
// sorted by name; where prefixes messages.
func profileServers(m map[string]mcpProfileServer, where string) ([]mcptools.Server, error) {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []mcptools.Server
	for _, n := range names {
		p := m[n]
		s := mcptools.Server{Name: n, Command: p.Command, Dir: p.Dir, URL: p.URL, PassEnv: p.PassEnv, ProtocolVersion: p.Protocol}
		if o := p.OAuth; o != nil {
			spec := n
			for _, kv := range [][2]string{{"client_id", o.ClientID}, {"client_secret_env", o.ClientSecretEnv}, {"client_metadata", o.ClientMetadata}, {"redirect", o.Redirect}} {
				if kv[1] != "" {
					spec += "," + kv[0] + "=" + kv[1]
				}
			}
			var err error
			if _, s.OAuth, err = mcpOAuth(spec); err != nil {
				return nil, fmt.Errorf("%smcp_servers.%s.oauth: %v", where, n, strings.TrimPrefix(err.Error(), "--mcp-oauth "+strconv.Quote(spec)+": "))
			}
		}
		for _, k := range sortedKeys(p.Env) {
			s.Env = append(s.Env, k+"="+p.Env[k])
		}
		for k, v := range p.Headers {
			if s.Header == nil {
				s.Header = map[string][]string{}
			}
			s.Header[k] = []string{os.ExpandEnv(v)}
		}
		out = append(out, s)
	}
	return out, nil
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
		servers, err := profileServers(pf.MCP, "--profile "+profile+": ")
		if err != nil {
			return nil, err
		}
		for _, s := range servers {
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
	for _, spec := range m.proto {
		name, rev, ok := strings.Cut(spec, "=")
		if !ok {
			name, rev = "", spec
		}
		if name != "" {
			if _, ok := byName[name]; !ok {
				return nil, fmt.Errorf("--mcp-protocol %q: no server is named %q", spec, name)
			}
		}
		for _, n := range order {
			if name == "" || n == name {
				s := byName[n]
				s.ProtocolVersion = rev
				byName[n] = s
			}
		}
	}
	open := openCommand(m.open)
	for _, spec := range m.oauth {
		name, o, err := mcpOAuth(spec)
		if err != nil {
			return nil, err
		}
		s, ok := byName[name]
		if !ok || s.URL == "" {
			return nil, fmt.Errorf("--mcp-oauth %q: no --mcp-url server is named %q", spec, name)
		}
		s.OAuth = o
		byName[name] = s
	}
	if err := m.policy(byName); err != nil {
		return nil, err
	}
	out := make([]mcptools.Server, 0, len(order))
	for _, n := range order {
		s := byName[n]
		if s.OAuth != nil {
			s.OAuth.Open = open
		}
		out = append(out, s)
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
	elicit, err := elicitAnswer(m.elicit, m.forward)
	if err != nil {
		return nil, usageError{err}
	}
	cfg := mcptools.Config{Logger: log, Roots: roots, Elicit: elicit}
	if m.maxMsg != "" {
		n, err := parseSize("--mcp-max-message", m.maxMsg, 1<<30)
		if err != nil || n < 1<<10 {
			return nil, usageError{cmp.Or(err, fmt.Errorf("--mcp-max-message %q: at least 1KiB", m.maxMsg))}
		}
		cfg.MaxMessageBytes = int(n)
	}
	for _, s := range servers {
		if s.OAuth != nil {
			// Starting includes the login: time for a person to sign in.
			cfg.StartTimeout = 5 * time.Minute
		}
	}
	b, err := mcptools.Bind(context.Background(), tools, cfg, servers...)
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
