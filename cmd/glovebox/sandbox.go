package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	profile                                string
	mounts                                 []string
	timeout, fuel, memory, stdout, stderr_ string
	stdin                                  string
	http                                   httpFlags
	profileHTTP                            httpFlags // the profile file's http section
	mcp                                    mcpFlags  // MCP servers (mcpflags.go)
}

func (s *sandboxFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.profile, "profile", "", "YAML file with limits, mounts and HTTP rules (keys: see --help); flags override it")
	f.StringArrayVar(&s.mounts, "mount", nil, "grant a host directory: HOST:GUEST[:rw] (read-only unless :rw; repeatable)")
	f.StringVar(&s.timeout, "timeout", "", "wall-clock limit, such as 500ms, 2s or 1m (default 10s; at most 24h)")
	f.StringVar(&s.fuel, "fuel", "", "CPU budget in fuel units (about one wasm instruction each), such as 500000000 or 5e8 (default: no fuel budget)")
	f.StringVar(&s.memory, "memory", "", "linear memory limit, such as 512MiB or 1GiB (default 512MiB; at least the ~370MiB the booted guest occupies, at most 4GiB)")
	f.StringVar(&s.stdout, "stdout-limit", "", "bytes of stdout kept, such as 64KiB (default 1MiB; at most 1GiB)")
	f.StringVar(&s.stderr_, "stderr-limit", "", "bytes of stderr kept (default 64KiB; at most 1GiB)")
	f.StringVar(&s.stdin, "stdin-limit", "", "bytes of standard input the guest may be given (default 1MiB; at most 1GiB)")
	s.http.add(f)
	s.mcp.add(f)
}

// config builds the sandbox configuration: the profile file's, then the
// flags given on top. Every mistake is a usage error, found before any
// work is done (host paths of mounts included).
func (s *sandboxFlags) config(f *pflag.FlagSet) (glovebox.Config, error) {
	var cfg glovebox.Config
	if s.profile != "" {
		var err error
		if cfg, s.profileHTTP, err = loadProfile(s.profile); err != nil {
			return cfg, usageError{err}
		}
	}
	l := &cfg.Limits
	if s.timeout != "" {
		d, err := parseDuration("--timeout", s.timeout)
		if err != nil {
			return cfg, usageError{err}
		}
		l.Timeout = d
	}
	if s.fuel != "" {
		n, err := parseCount("--fuel", s.fuel, math.MaxInt64)
		if err != nil {
			return cfg, usageError{err}
		}
		l.Fuel = n
	}
	for _, b := range []struct {
		flag string
		val  string
		dst  func(uint64)
	}{
		{"memory", s.memory, func(n uint64) { l.Memory = int64(n) }},
		{"stdout-limit", s.stdout, func(n uint64) { l.Stdout = int(n) }},
		{"stderr-limit", s.stderr_, func(n uint64) { l.Stderr = int(n) }},
		{"stdin-limit", s.stdin, func(n uint64) { l.Stdin = int(n) }},
	} {
		if b.val == "" {
			continue
		}
		n, err := parseSize("--"+b.flag, b.val, sizeMax[b.flag])
		if err != nil {
			return cfg, usageError{err}
		}
		b.dst(n)
	}
	for _, spec := range s.mounts {
		m, err := parseMount(spec)
		if err != nil {
			return cfg, usageError{err}
		}
		if err := checkHostDir(m.HostPath); err != nil {
			return cfg, usageError{fmt.Errorf("--mount %q: %w", spec, err)}
		}
		// A flag replaces the profile's mount at the same guest path.
		cfg.Mounts = slices.DeleteFunc(cfg.Mounts, func(p glovebox.Mount) bool { return p.GuestPath == m.GuestPath })
		cfg.Mounts = append(cfg.Mounts, m)
	}
	tools, err := s.http.over(s.profileHTTP).tools()
	if err != nil {
		return cfg, err
	}
	cfg.Tools = tools
	if cfg.Tools, err = s.mcp.bind(cfg.Tools, s.profile); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// checkHostDir reports a mount's host path that is not a directory.
func checkHostDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("host directory %s: %w", p, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("host path %s is not a directory", p)
	}
	return nil
}

// sizeMax is the largest value of each size flag and profile key: the
// library's 4 GiB for memory (a 32-bit guest); 1 GiB for buffers the
// host holds in memory; 1 TiB for file writes.
var sizeMax = map[string]uint64{
	"memory": 4 << 30, "stdout-limit": 1 << 30, "stderr-limit": 1 << 30, "stdin-limit": 1 << 30,
	"limits.memory": 4 << 30, "limits.stdout": 1 << 30, "limits.stderr": 1 << 30, "limits.stdin": 1 << 30,
	"limits.value": 1 << 30, "limits.tool_payload": 1 << 30, "limits.file_write": 1 << 40,
}

// maxDuration bounds --timeout and the profile's durations.
const maxDuration = 24 * time.Hour

// parseSize reads a byte size for what (a flag or profile key): bytes, or
// a number with a unit. The message names what, the value, the accepted
// forms and the maximum.
func parseSize(what, s string, max uint64) (uint64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil || strings.HasPrefix(strings.TrimSpace(s), "-") {
		return 0, fmt.Errorf("%s %q is not a size: write bytes or a number with a unit, such as 65536, 64KiB, 512MiB or 1GiB (at most %s)", what, s, sizeString(max))
	}
	if n > max {
		return 0, fmt.Errorf("%s %q is over the maximum of %s", what, s, sizeString(max))
	}
	return n, nil
}

func sizeString(n uint64) string {
	switch {
	case n >= 1<<40 && n%(1<<40) == 0:
		return fmt.Sprintf("%dTiB", n>>40)
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	}
	return fmt.Sprintf("%d bytes", n)
}

// parseDuration reads a duration for what: a number with a unit, at most
// maxDuration.
func parseDuration(what, s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s %q is not a duration: write a number with a unit, such as 500ms, 10s or 2m (at most %v)", what, s, maxDuration)
	case d < 0:
		return 0, fmt.Errorf("%s %q is negative: write a duration such as 500ms, 10s or 2m", what, s)
	case d > maxDuration:
		return 0, fmt.Errorf("%s %q is over the maximum of %v", what, s, maxDuration)
	}
	return d, nil
}

// parseCount reads a whole number for what: digits (with _ between them
// allowed) or a power-of-ten form such as 5e8, at most max.
func parseCount(what, s string, max uint64) (uint64, error) {
	t := strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		if f, ferr := strconv.ParseFloat(t, 64); ferr == nil && strings.ContainsAny(t, "eE") && f >= 0 && f == math.Trunc(f) && f <= float64(max) {
			n, err = uint64(f), nil
		}
	}
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s %q is over the maximum of %d", what, s, max)
		}
		return 0, fmt.Errorf("%s %q is not a whole number: write digits such as 500000000 or 500_000_000, or 5e8 (at most %d)", what, s, max)
	}
	if n > max {
		return 0, fmt.Errorf("%s %q is over the maximum of %d", what, s, max)
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

// profileFile is the YAML form of a sandbox configuration. Scalars are
// read as strings and parsed here, so every message names its key.
// profileKeys documents every key; a test keeps the two in step.
type profileFile struct {
	Limits struct {
		Timeout     string `yaml:"timeout"`
		Fuel        string `yaml:"fuel"`
		Memory      string `yaml:"memory"`
		Stdout      string `yaml:"stdout"`
		Stderr      string `yaml:"stderr"`
		Stdin       string `yaml:"stdin"`
		Value       string `yaml:"value"`
		ToolCalls   string `yaml:"tool_calls"`
		ToolTime    string `yaml:"tool_time"`
		ToolPayload string `yaml:"tool_payload"`
		FileWrite   string `yaml:"file_write"`
		FileCreates string `yaml:"file_creates"`
	} `yaml:"limits"`
	HTTP struct {
		Allow           []string `yaml:"allow"`
		AnyHost         bool     `yaml:"any_host"`
		AllowIPLiterals bool     `yaml:"allow_ip_literals"`
		Ports           []string `yaml:"ports"`
		Trust           []string `yaml:"trust"`
	} `yaml:"http"`
	Mounts []struct {
		Host        string `yaml:"host"`
		Guest       string `yaml:"guest"`
		Writable    bool   `yaml:"writable"`
		Description string `yaml:"description"`
	} `yaml:"mounts"`
	MCPServers yaml.Node  `yaml:"mcp_servers"` // read by mcpflags.go
	Box        boxProfile `yaml:"box"`         // read by glovebox run (run.go)
}

// profileKeys are the profile's keys, as docs/cli.md's table and eval --help
// list them: key, flag, meaning.
var profileKeys = append([]struct{ key, flag, doc string }{
	{"limits.timeout", "--timeout", "wall-clock limit per eval (10s)"},
	{"limits.fuel", "--fuel", "CPU budget in fuel units (none)"},
	{"limits.memory", "--memory", "linear memory (512MiB; 370MiB to 4GiB)"},
	{"limits.stdout", "--stdout-limit", "stdout bytes kept (1MiB)"},
	{"limits.stderr", "--stderr-limit", "stderr bytes kept (64KiB)"},
	{"limits.stdin", "--stdin-limit", "standard input bytes given to the guest (1MiB)"},
	{"limits.value", "", "encoded size of the value (1MiB)"},
	{"limits.tool_calls", "", "tool calls per eval (1000)"},
	{"limits.tool_time", "", "time in tools per eval (the timeout)"},
	{"limits.tool_payload", "", "bytes per tool call, each way (1MiB)"},
	{"limits.file_write", "", "disk space in use by the files an eval wrote (64MiB)"},
	{"limits.file_creates", "", "files, directories and links an eval made that exist (1000)"},
	{"http.allow", "--http-allow", "host patterns the HTTP tool may reach (list)"},
	{"http.any_host", "--http-any-host", "every host the IP floor permits (true/false)"},
	{"http.allow_ip_literals", "--http-allow-ip-literals", "URLs may name hosts by IP address (true/false)"},
	{"http.ports", "--http-port", "ports URLs may use (list; default 80, 443)"},
	{"http.trust", "--http-trust", "networks exempt from the IP floor (list of CIDR prefixes)"},
	{"mounts[].host", "--mount HOST:", "host directory (relative to the profile file)"},
	{"mounts[].guest", "--mount :GUEST", "absolute path in the guest"},
	{"mounts[].writable", "--mount ::rw", "the guest may write (false)"},
	{"mounts[].description", "", "what the directory holds, for tool descriptions"},
	{"mcp_servers", "--mcp-server / --mcp-url", "MCP servers whose tools the guest may call (see docs/mcp.md)"},
}, append(boxProfileKeys, backendProfileKeys...)...) // glovebox run's box section (run.go, run_backends.go)

// profileHelp lists the profile keys for eval --help.
var profileHelp = func() string {
	var b strings.Builder
	b.WriteString("Profile keys (YAML; flag, then meaning and default):\n")
	for _, k := range profileKeys {
		flag := k.flag
		if flag == "" {
			flag = "-"
		}
		fmt.Fprintf(&b, "  %-22s %-25s %s\n", k.key, flag, k.doc)
	}
	return b.String()
}()

// loadProfile reads a profile file. Unknown keys are errors, so a typo
// never silently drops a limit; relative host paths are taken from the
// file's directory, which must exist.
func loadProfile(path string) (cfg glovebox.Config, h httpFlags, err error) {
	f, err := os.Open(path)
	if err != nil {
		return cfg, h, fmt.Errorf("--profile: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var pf profileFile
	if err := dec.Decode(&pf); err != nil && !errors.Is(err, io.EOF) {
		return cfg, h, fmt.Errorf("--profile %s: %s", path, yamlMessage(err))
	}
	at := func(key string) string { return fmt.Sprintf("--profile %s: %s", path, key) }
	return profileSettings(&pf, filepath.Dir(path), at)
}

// profileSettings turns a decoded profile into a Config (limits,
// mounts: host paths relative to dir, each an existing directory) and
// the HTTP tool's settings. at names a key in messages.
func profileSettings(pf *profileFile, dir string, at func(key string) string) (cfg glovebox.Config, h httpFlags, err error) {
	l := &cfg.Limits
	durations := []struct {
		key string
		val string
		dst *time.Duration
	}{{"limits.timeout", pf.Limits.Timeout, &l.Timeout}, {"limits.tool_time", pf.Limits.ToolTime, &l.ToolTime}}
	for _, d := range durations {
		if d.val == "" {
			continue
		}
		if *d.dst, err = parseDuration(at(d.key), d.val); err != nil {
			return cfg, h, err
		}
	}
	sizes := []struct {
		key string
		val string
		dst func(uint64)
	}{
		{"limits.memory", pf.Limits.Memory, func(n uint64) { l.Memory = int64(n) }},
		{"limits.stdout", pf.Limits.Stdout, func(n uint64) { l.Stdout = int(n) }},
		{"limits.stderr", pf.Limits.Stderr, func(n uint64) { l.Stderr = int(n) }},
		{"limits.stdin", pf.Limits.Stdin, func(n uint64) { l.Stdin = int(n) }},
		{"limits.value", pf.Limits.Value, func(n uint64) { l.Value = int(n) }},
		{"limits.tool_payload", pf.Limits.ToolPayload, func(n uint64) { l.ToolPayload = int(n) }},
		{"limits.file_write", pf.Limits.FileWrite, func(n uint64) { l.FileWrite = int64(n) }},
	}
	for _, s := range sizes {
		if s.val == "" {
			continue
		}
		n, err := parseSize(at(s.key), s.val, sizeMax[s.key])
		if err != nil {
			return cfg, h, err
		}
		s.dst(n)
	}
	counts := []struct {
		key string
		val string
		max uint64
		dst func(uint64)
	}{
		{"limits.fuel", pf.Limits.Fuel, math.MaxInt64, func(n uint64) { l.Fuel = n }},
		{"limits.tool_calls", pf.Limits.ToolCalls, 1 << 30, func(n uint64) { l.ToolCalls = int(n) }},
		{"limits.file_creates", pf.Limits.FileCreates, 1 << 30, func(n uint64) { l.FileCreates = int(n) }},
	}
	for _, c := range counts {
		if c.val == "" {
			continue
		}
		n, err := parseCount(at(c.key), c.val, c.max)
		if err != nil {
			return cfg, h, err
		}
		c.dst(n)
	}
	for i, m := range pf.Mounts {
		if m.Host == "" || m.Guest == "" {
			return cfg, h, fmt.Errorf("%s needs host and guest", at(fmt.Sprintf("mounts[%d]", i)))
		}
		host := m.Host
		if !filepath.IsAbs(host) {
			host = filepath.Join(dir, host)
		}
		if err := checkHostDir(host); err != nil {
			return cfg, h, fmt.Errorf("%s: %w", at(fmt.Sprintf("mounts[%d].host", i)), err)
		}
		cfg.Mounts = append(cfg.Mounts, glovebox.Mount{HostPath: host, GuestPath: m.Guest, Writable: m.Writable, Description: m.Description})
	}
	h = httpFlags{allow: pf.HTTP.Allow, anyHost: pf.HTTP.AnyHost, ipLiterals: pf.HTTP.AllowIPLiterals, trust: pf.HTTP.Trust, ports: pf.HTTP.Ports}
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
	return unknownField.ReplaceAllString(msg, "unknown key $1 (see docs/cli.md for the keys)")
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type [^\n]*`)
