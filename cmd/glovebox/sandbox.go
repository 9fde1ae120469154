package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gloveboxhq/glovebox"
)

// sandboxFlags are the flags eval and repl share: limits, mounts and a
// profile file.
type sandboxFlags struct {
	profile                 string
	mounts                  []string
	limits                  glovebox.Limits
	memory, stdout, stderr_ string
	http                    httpFlags
	profileHTTP             httpFlags // the profile file's http section
	mcp                     mcpFlags  // MCP servers (mcpflags.go)
}

func (s *sandboxFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.profile, "profile", "", "YAML file with limits and mounts (see README); flags override it")
	f.StringArrayVar(&s.mounts, "mount", nil, "grant a host directory: HOST:GUEST[:rw] (read-only unless :rw; repeatable)")
	f.DurationVar(&s.limits.Timeout, "timeout", 0, "wall-clock limit, a Go duration such as 2s (0: the default, 10s)")
	f.Uint64Var(&s.limits.Fuel, "fuel", 0, "CPU budget in wasmtime fuel units (0: no fuel budget)")
	f.StringVar(&s.memory, "memory", "", "linear memory limit, e.g. 512MiB or 1GiB (default 512MiB; at least the ~320MiB the booted guest occupies)")
	f.StringVar(&s.stdout, "stdout-limit", "", "bytes of stdout kept, e.g. 64KiB (0: the default, 1MiB)")
	f.StringVar(&s.stderr_, "stderr-limit", "", "bytes of stderr kept (0: the default, 64KiB)")
	s.http.add(f)
	s.mcp.add(f)
}

// config builds the sandbox configuration: the profile file's, then the
// flags given on top.
func (s *sandboxFlags) config(f *pflag.FlagSet) (glovebox.Config, error) {
	var cfg glovebox.Config
	if s.profile != "" {
		var err error
		if cfg, s.profileHTTP, err = loadProfile(s.profile); err != nil {
			return cfg, usageError{err}
		}
	}
	if f.Changed("timeout") {
		cfg.Limits.Timeout = s.limits.Timeout
	}
	if f.Changed("fuel") {
		cfg.Limits.Fuel = s.limits.Fuel
	}
	for _, b := range []struct {
		flag string
		val  string
		dst  func(uint64)
	}{
		{"memory", s.memory, func(n uint64) { cfg.Limits.Memory = int64(n) }},
		{"stdout-limit", s.stdout, func(n uint64) { cfg.Limits.Stdout = int(n) }},
		{"stderr-limit", s.stderr_, func(n uint64) { cfg.Limits.Stderr = int(n) }},
	} {
		if b.val == "" {
			continue
		}
		n, err := parseBytes("--"+b.flag, b.val)
		if err != nil {
			return cfg, err
		}
		b.dst(n)
	}
	for _, spec := range s.mounts {
		m, err := parseMount(spec)
		if err != nil {
			return cfg, usageError{err}
		}
		// A flag replaces the profile's mount at the same guest path.
		cfg.Mounts = slices.DeleteFunc(cfg.Mounts, func(p glovebox.Mount) bool { return p.GuestPath == m.GuestPath })
		cfg.Mounts = append(cfg.Mounts, m)
	}
	h := s.http
	h.allow = append(append([]string(nil), s.profileHTTP.allow...), h.allow...)
	h.anyHost = h.anyHost || s.profileHTTP.anyHost
	tools, err := h.tools()
	if err != nil {
		return cfg, err
	}
	cfg.Tools = tools
	if cfg.Tools, err = s.mcp.bind(cfg.Tools, s.profile); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func parseBytes(what, s string) (uint64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("%s: %w", what, err)}
	}
	if n > 1<<40 {
		return 0, usageError{fmt.Errorf("%s: %s is too large", what, s)}
	}
	return n, nil
}

// parseMount reads HOST:GUEST[:rw] or HOST:GUEST:ro. The host path is
// made absolute; the guest path is checked by glovebox.New.
func parseMount(spec string) (glovebox.Mount, error) {
	parts := strings.Split(spec, ":")
	var m glovebox.Mount
	switch {
	case len(parts) == 3 && (parts[2] == "rw" || parts[2] == "ro"):
		m.Writable = parts[2] == "rw"
	case len(parts) != 2:
		return m, fmt.Errorf("--mount %q: want HOST:GUEST, HOST:GUEST:rw or HOST:GUEST:ro", spec)
	}
	if parts[0] == "" || parts[1] == "" {
		return m, fmt.Errorf("--mount %q: the host and guest paths must not be empty", spec)
	}
	host, err := filepath.Abs(parts[0])
	if err != nil {
		return m, fmt.Errorf("--mount %q: %w", spec, err)
	}
	m.HostPath, m.GuestPath = host, parts[1]
	return m, nil
}

// profileFile is the YAML form of a sandbox configuration.
type profileFile struct {
	Limits struct {
		Timeout     string `yaml:"timeout"`
		Fuel        uint64 `yaml:"fuel"`
		Memory      string `yaml:"memory"`
		Stdout      string `yaml:"stdout"`
		Stderr      string `yaml:"stderr"`
		Value       string `yaml:"value"`
		ToolCalls   int    `yaml:"tool_calls"`
		ToolTime    string `yaml:"tool_time"`
		ToolPayload string `yaml:"tool_payload"`
		FileWrite   string `yaml:"file_write"`
		FileCreates int    `yaml:"file_creates"`
	} `yaml:"limits"`
	HTTP struct {
		Allow   []string `yaml:"allow"`
		AnyHost bool     `yaml:"any_host"`
	} `yaml:"http"`
	Mounts []struct {
		Host        string `yaml:"host"`
		Guest       string `yaml:"guest"`
		Writable    bool   `yaml:"writable"`
		Description string `yaml:"description"`
	} `yaml:"mounts"`
	MCPServers yaml.Node `yaml:"mcp_servers"` // read by mcpflags.go
}

// loadProfile reads a profile file. Unknown keys are errors, so a typo
// never silently drops a limit; relative host paths are taken from the
// file's directory.
func loadProfile(path string) (cfg glovebox.Config, h httpFlags, err error) {
	f, err := os.Open(path)
	if err != nil {
		return cfg, h, fmt.Errorf("--profile: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var pf profileFile
	if err := dec.Decode(&pf); err != nil {
		return cfg, h, fmt.Errorf("--profile %s: %s", path, yamlMessage(err))
	}
	l := &cfg.Limits
	durations := []struct {
		key string
		val string
		dst *time.Duration
	}{{"timeout", pf.Limits.Timeout, &l.Timeout}, {"tool_time", pf.Limits.ToolTime, &l.ToolTime}}
	for _, d := range durations {
		if d.val == "" {
			continue
		}
		if *d.dst, err = time.ParseDuration(d.val); err != nil {
			return cfg, h, fmt.Errorf("--profile %s: limits.%s: %w", path, d.key, err)
		}
	}
	sizes := []struct {
		key string
		val string
		dst func(uint64)
	}{
		{"memory", pf.Limits.Memory, func(n uint64) { l.Memory = int64(n) }},
		{"stdout", pf.Limits.Stdout, func(n uint64) { l.Stdout = int(n) }},
		{"stderr", pf.Limits.Stderr, func(n uint64) { l.Stderr = int(n) }},
		{"value", pf.Limits.Value, func(n uint64) { l.Value = int(n) }},
		{"tool_payload", pf.Limits.ToolPayload, func(n uint64) { l.ToolPayload = int(n) }},
		{"file_write", pf.Limits.FileWrite, func(n uint64) { l.FileWrite = int64(n) }},
	}
	for _, s := range sizes {
		if s.val == "" {
			continue
		}
		n, err := parseBytes(fmt.Sprintf("--profile %s: limits.%s", path, s.key), s.val)
		if err != nil {
			return cfg, h, errors.Unwrap(err)
		}
		s.dst(n)
	}
	l.Fuel, l.ToolCalls, l.FileCreates = pf.Limits.Fuel, pf.Limits.ToolCalls, pf.Limits.FileCreates
	for i, m := range pf.Mounts {
		if m.Host == "" || m.Guest == "" {
			return cfg, h, fmt.Errorf("--profile %s: mounts[%d] needs host and guest", path, i)
		}
		host := m.Host
		if !filepath.IsAbs(host) {
			host = filepath.Join(filepath.Dir(path), host)
		}
		cfg.Mounts = append(cfg.Mounts, glovebox.Mount{HostPath: host, GuestPath: m.Guest, Writable: m.Writable, Description: m.Description})
	}
	h = httpFlags{allow: pf.HTTP.Allow, anyHost: pf.HTTP.AnyHost}
	return cfg, h, nil
}

// newRuntime starts a Runtime for the CLI; configuration mistakes are
// usage errors.
func newRuntime(ctx context.Context, cfg glovebox.Config) (*glovebox.Runtime, error) {
	cfg.Progress = progress
	cfg.PoolSize = -1
	rt, err := glovebox.New(ctx, cfg)
	if err != nil && (errors.Is(err, glovebox.ErrInvalidLimits) || errors.Is(err, glovebox.ErrInvalidMount)) {
		return nil, usageError{err}
	}
	return rt, err
}

// yamlMessage rewrites the YAML decoder's report of an unknown key ("field
// timout not found in type struct {...}") as "unknown key timout".
func yamlMessage(err error) string {
	msg := err.Error()
	return unknownField.ReplaceAllString(msg, "unknown key $1 (see the README for the keys)")
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type [^\n]*`)
