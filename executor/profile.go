package executor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// EvalProfile is a named set of host resources the operator gives the
// evals that name it (the "profile" of an eval, session or code mode
// request): directories of the executor's host mounted into the guest,
// tools that run here on the executor (the HTTP tool, bound MCP
// servers' tools) beside the client's own, and limits. Such resources
// live on the executor's host, so only its operator declares them; a
// client can only select one, by name.
//
// A profile's tools run in this process, under their own rules
// (httptool's address floor, mcptools' caps); their calls do not go
// back to the client (its hooks and transcript do not see them: the
// eval's record does), and they count against the executor's caps of
// the eval (tool calls, tool payload, the timeout).
type EvalProfile struct {
	// Tenants are the tenants that may use the profile, by name. A
	// tenant not listed gets unknown_profile, as for a name never
	// declared. Empty: no tenant (a profile must be granted).
	Tenants []string
	// Mounts are bound into the guest of every eval of the profile
	// (glovebox.Mount's rules: read-only unless Writable).
	Mounts []glovebox.Mount
	// Tools run on the executor when the guest calls them. A request
	// naming one of their names among its own tools is refused
	// bad_request. Nil: none.
	Tools *glovebox.Toolset
	// Servers describe the bound MCP servers among Tools for code mode
	// (mcptools' Binding.Notes).
	Servers []codemode.Server
	// Limits default and cap the eval limits of requests naming the
	// profile: each set field replaces a request's zero or larger
	// value. The tool budgets (ToolCalls, ToolTime) stay the client's.
	// Zero fields leave the executor's own caps.
	Limits glovebox.Limits
}

// profileState is a checked EvalProfile with its tools' names and docs.
type profileState struct {
	EvalProfile
	name  string
	names []string                  // its tools' names, sorted
	docs  []clientwire.CodeModeTool // for code mode
}

// profilePrefix starts the entry of a tool set's names that names its
// profile ("@analytics"): no tool name can start with it, so the
// profile travels with the names wherever they are kept (a session's
// row, a paused eval's meta) with no change to what stores them.
const profilePrefix = "@"

// withProfile returns names (sorted, checked) with profile's entry in
// front; names unchanged for "".
func withProfile(profile string, names []string) []string {
	if profile == "" {
		return names
	}
	return append([]string{profilePrefix + profile}, names...)
}

// splitProfile undoes withProfile.
func splitProfile(names []string) (string, []string) {
	if len(names) > 0 && strings.HasPrefix(names[0], profilePrefix) {
		return strings.TrimPrefix(names[0], profilePrefix), names[1:]
	}
	return "", names
}

// checkProfiles validates cfg.Profiles and reads each one's tool docs
// (through a Runtime holding its tools and no VM). Errors name the
// profile and the field.
func checkProfiles(ctx context.Context, cfg *EvalConfig) (map[string]*profileState, error) {
	out := map[string]*profileState{}
	for name, p := range cfg.Profiles {
		if !wire.ValidProfileName(name) {
			return nil, fmt.Errorf("executor: eval profile %q: a name is 1 to 64 of a-z 0-9 _ -, starting with a letter", name)
		}
		if len(p.Tenants) == 0 {
			return nil, fmt.Errorf("executor: eval profile %s: tenants: list the tenants that may use it", name)
		}
		ps := &profileState{EvalProfile: p, name: name}
		ps.Tenants = slices.Clone(p.Tenants)
		ps.Mounts = slices.Clone(p.Mounts)
		// A Runtime of the profile alone (no VM made) checks its mounts,
		// limits and tool names as every eval's will, and documents the
		// tools.
		rt, err := glovebox.New(ctx, glovebox.Config{Tools: p.Tools, Mounts: p.Mounts, Limits: p.Limits, PoolSize: -1,
			CacheDir: cfg.CacheDir, ImagePath: cfg.ImagePath})
		if err != nil {
			return nil, fmt.Errorf("executor: eval profile %s: %w", name, err)
		}
		if p.Tools != nil {
			ps.names = p.Tools.Names()
			ps.docs = clientwire.FromDocs(rt.ToolDocs())
		}
		rt.Close()
		out[name] = ps
	}
	return out, nil
}

// profile returns the profile name for tenant, or unknown_profile (the
// same for a name never declared and one the tenant is not granted, so
// a tenant learns nothing of other tenants' profiles).
func (e *evals) profile(tenant, name string) (*profileState, *wire.Error) {
	p := e.profiles[name]
	if p == nil || !slices.Contains(p.Tenants, tenant) {
		return nil, wire.Errorf(wire.CodeUnknownProfile, "no eval profile %q for tenant %s (profiles are the executor's operator's: see its config's profiles section)", name, tenant)
	}
	return p, nil
}

// resolveProfile checks a request's profile for tenant and its tool
// names against the profile's tools, and returns the names to run with
// (the profile's entry in front) and the limits the profile applies.
// Errors: unknown_profile; bad_request for a tool name the profile
// has, or a profile with an eval worker.
func (e *evals) resolveProfile(tenant, name string, names []string, lim wire.EvalLimits) ([]string, wire.EvalLimits, *wire.Error) {
	if name == "" {
		return names, lim, nil
	}
	p, werr := e.profile(tenant, name)
	if werr != nil {
		return nil, lim, werr
	}
	if e.worker != nil {
		return nil, lim, wire.Errorf(wire.CodeBadRequest, "profile: eval profiles are not served with an eval worker (--eval-worker): their mounts and tools are this process's")
	}
	var both []string
	for _, n := range names {
		if slices.Contains(p.names, n) {
			both = append(both, n)
		}
	}
	if len(both) > 0 {
		return nil, lim, wire.Errorf(wire.CodeBadRequest, "tools: %s: the profile %s has tools of that name (its tools run here); rename yours", strings.Join(both, ", "), name)
	}
	return withProfile(name, names), p.apply(lim), nil
}

// apply returns l with the profile's limits as defaults and caps.
func (p *profileState) apply(l wire.EvalLimits) wire.EvalLimits {
	pl := p.Limits
	pick := func(v *int64, c int64) {
		if c > 0 && (*v <= 0 || *v > c) {
			*v = c
		}
	}
	pickInt := func(v *int, c int) {
		if c > 0 && (*v <= 0 || *v > c) {
			*v = c
		}
	}
	timeout := l.TimeoutMS
	pick(&timeout, pl.Timeout.Milliseconds())
	l.TimeoutMS = timeout
	pick(&l.Memory, pl.Memory)
	pickInt(&l.Stdout, pl.Stdout)
	pickInt(&l.Stderr, pl.Stderr)
	pickInt(&l.Value, pl.Value)
	pickInt(&l.ToolPayload, pl.ToolPayload)
	pick(&l.FileWrite, pl.FileWrite)
	pickInt(&l.FileCreates, pl.FileCreates)
	if pl.Fuel > 0 && (l.Fuel == 0 || l.Fuel > pl.Fuel) {
		l.Fuel = pl.Fuel
	}
	return l
}

// profileRuntime adds the profile named in names (withProfile) to a
// tool set's config: its tools merged with the client's relayed ones,
// its mounts. Errors: the profile is gone (a session or paused eval
// stored under a profile this executor's config no longer has).
func (e *evals) profileRuntime(names []string, tools *glovebox.Toolset, cfg *glovebox.Config) ([]string, error) {
	profile, names := splitProfile(names)
	if profile == "" {
		return names, nil
	}
	p := e.profiles[profile]
	if p == nil {
		return nil, fmt.Errorf("%w: the eval profile %q is not in this executor's config", glovebox.ErrInvalidTool, profile)
	}
	if p.Tools != nil {
		if err := tools.Merge(p.Tools); err != nil {
			return nil, err
		}
	}
	cfg.Mounts = p.Mounts
	return names, nil
}

// codeModeProfile adds a code mode request's profile (its tools, mounts
// and server notes) to what the client describes, and applies its
// limits.
func (e *evals) codeModeProfile(tenant string, req *wire.CodeModeRequest) *wire.Error {
	if req.Profile == "" {
		return nil
	}
	names := make([]string, 0, len(req.Tools))
	for _, t := range req.Tools {
		names = append(names, t.Name)
	}
	_, lim, werr := e.resolveProfile(tenant, req.Profile, names, req.Limits)
	if werr != nil {
		return werr
	}
	p := e.profiles[req.Profile]
	req.Limits = lim
	req.Tools = append(req.Tools, p.docs...)
	slices.SortFunc(req.Tools, func(a, b clientwire.CodeModeTool) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range p.Servers {
		req.Servers = append(req.Servers, clientwire.CodeModeServer{Name: s.Name, Tools: s.Tools, Instructions: s.Instructions})
	}
	for _, m := range p.Mounts {
		req.Mounts = append(req.Mounts, clientwire.CodeModeMount{Guest: m.GuestPath, Writable: m.Writable, Description: m.Description})
	}
	return nil
}
