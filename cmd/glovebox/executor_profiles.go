package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/httptool"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// executorProfile is one entry of the executor config's profiles
// section: an eval profile (EXECUTOR.md, "Eval profiles"), written as an
// eval --profile file is (limits, mounts, http, mcp_servers; docs/cli.md)
// plus the tenants it is granted to.
type executorProfile struct {
	Tenants     []string `yaml:"tenants"`
	profileFile `yaml:",inline"`
}

// executorProfiles builds the config's eval profiles: mounts checked
// (relative host paths from the config file's directory), limits parsed,
// the HTTP tool made and the MCP servers started (their bindings are
// returned, to close at exit). Any mistake is a usage error naming the
// profile and the key.
func executorProfiles(ctx context.Context, fc *executorFile, path string, log *slog.Logger) (map[string]executor.EvalProfile, []*mcptools.Binding, error) {
	if len(fc.Profiles) == 0 {
		return nil, nil, nil
	}
	tenants := map[string]bool{}
	for _, t := range fc.Tenants {
		tenants[t.Name] = true
	}
	out := map[string]executor.EvalProfile{}
	var bindings []*mcptools.Binding
	fail := func(err error) (map[string]executor.EvalProfile, []*mcptools.Binding, error) {
		for _, b := range bindings {
			b.Close()
		}
		return nil, nil, err
	}
	names := make([]string, 0, len(fc.Profiles))
	for n := range fc.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := fc.Profiles[name]
		at := func(key string) string { return fmt.Sprintf("executor: %s: profiles.%s.%s", path, name, key) }
		if len(p.Tenants) == 0 {
			return fail(usageError{fmt.Errorf("%s: list the tenants that may use the profile", at("tenants"))})
		}
		for _, t := range p.Tenants {
			if !tenants[t] {
				return fail(usageError{fmt.Errorf("%s: no tenant is named %q", at("tenants"), t)})
			}
		}
		if !reflect.ValueOf(p.Box).IsZero() {
			return fail(usageError{fmt.Errorf("%s: an eval profile has no box section (runs take their settings from the request)", at("box"))})
		}
		for key, v := range map[string]string{"tool_calls": p.Limits.ToolCalls, "tool_time": p.Limits.ToolTime, "stdin": p.Limits.Stdin} {
			if v != "" {
				return fail(usageError{fmt.Errorf("%s: not an eval profile's: the tool budgets are the client's, and stdin the request's", at("limits."+key))})
			}
		}
		cfg, h, err := profileSettings(&p.profileFile, filepath.Dir(path), at)
		if err != nil {
			return fail(usageError{err})
		}
		ep := executor.EvalProfile{Tenants: p.Tenants, Mounts: cfg.Mounts, Limits: cfg.Limits}
		var ts glovebox.Toolset
		if len(h.allow) > 0 || h.anyHost {
			hc, err := h.config()
			if err != nil {
				return fail(usageError{fmt.Errorf("%s: %v", at("http"), err)})
			}
			// One tool serves every eval of the profile for the executor's
			// life: its lifetime budgets are lifted, and each eval is
			// bounded by its own limits (its timeout, the tool-call cap).
			hc.MaxRequests, hc.MaxTime = math.MaxInt32, time.Duration(math.MaxInt64)
			tool, err := httptool.New(hc)
			if err != nil {
				return fail(usageError{fmt.Errorf("%s: %v", at("http"), err)})
			}
			if err := tool.Register(&ts); err != nil {
				return fail(err)
			}
		} else if h.ipLiterals || len(h.ports) > 0 || len(h.trust) > 0 {
			return fail(usageError{fmt.Errorf("%s: allow_ip_literals, ports and trust need allow or any_host", at("http"))})
		}
		if p.MCPServers.Kind != 0 {
			servers, err := profileMCP(&p.MCPServers, at(""))
			if err != nil {
				return fail(usageError{err})
			}
			b, err := mcptools.Bind(ctx, &ts, mcptools.Config{Logger: log}, servers...)
			if err != nil {
				return fail(fmt.Errorf("%s: %v", at("mcp_servers"), err))
			}
			bindings = append(bindings, b)
			for _, n := range b.Notes() {
				ep.Servers = append(ep.Servers, codemode.Server{Name: n.Name, Tools: slices.Clone(n.Tools), Instructions: n.Instructions})
			}
		}
		if len(ts.Names()) > 0 {
			ep.Tools = &ts
		}
		out[name] = ep
	}
	return out, bindings, nil
}

// profileMCP decodes a profile's mcp_servers node strictly (an unknown
// key is an error) and makes the servers.
func profileMCP(node *yaml.Node, where string) ([]mcptools.Server, error) {
	b, err := yaml.Marshal(node)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var m map[string]mcpProfileServer
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%smcp_servers: %s", where, yamlMessage(err))
	}
	return profileServers(m, where)
}
