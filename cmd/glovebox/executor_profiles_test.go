package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExecutorProfilesConfig: the config's eval profiles are read as an
// eval --profile file is (relative mounts from the config's directory,
// sizes and durations with units, the HTTP tool), granted to named
// tenants; every mistake is refused before the executor serves, naming
// the profile and the key.
func TestExecutorProfilesConfig(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	write := func(body string) string {
		p := filepath.Join(dir, "executor.yaml")
		if err := os.WriteFile(p, []byte("tenants:\n  - {name: app, token_sha256: "+strings.Repeat("ab", 32)+"}\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	load := func(body string) (error, int) {
		t.Helper()
		path := write(body)
		fc, err := readExecutorFile(path)
		if err != nil {
			return err, 0
		}
		ps, bs, err := executorProfiles(context.Background(), fc, path, slog.New(slog.DiscardHandler))
		for _, b := range bs {
			b.Close()
		}
		return err, len(ps)
	}
	err, n := load(`profiles:
  analytics:
    tenants: [app]
    limits: {timeout: 30s, memory: 768MiB}
    mounts: [{host: ./data, guest: /data, description: sales}]
    http: {allow: [api.example.com], ports: ["443"]}
`)
	if err != nil || n != 1 {
		t.Fatalf("a good profile: %v (%d)", err, n)
	}
	fc, _ := readExecutorFile(write(`profiles:
  analytics:
    tenants: [app]
    limits: {timeout: 30s, memory: 768MiB}
    mounts: [{host: ./data, guest: /data}]
    http: {allow: [api.example.com]}
`))
	ps, _, err := executorProfiles(context.Background(), fc, filepath.Join(dir, "executor.yaml"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p := ps["analytics"]
	if p.Limits.Timeout != 30*time.Second || p.Limits.Memory != 768<<20 || p.Mounts[0].HostPath != filepath.Join(dir, "data") ||
		p.Tools == nil || len(p.Tools.Names()) != 7 || p.Tenants[0] != "app" {
		t.Fatalf("profile %+v", p)
	}
	for body, want := range map[string]string{
		"profiles:\n  a: {limits: {}}\n":                                                "profiles.a.tenants: list the tenants",
		"profiles:\n  a: {tenants: [ghost]}\n":                                          `profiles.a.tenants: no tenant is named "ghost"`,
		"profiles:\n  a: {tenants: [app], mounts: [{host: ./nope, guest: /d}]}\n":       "profiles.a.mounts[0].host",
		"profiles:\n  a: {tenants: [app], limits: {memory: 12 parsecs}}\n":              "profiles.a.limits.memory",
		"profiles:\n  a: {tenants: [app], limits: {tool_calls: 5}}\n":                   "profiles.a.limits.tool_calls: not an eval profile's",
		"profiles:\n  a: {tenants: [app], box: {timeout: 5s}}\n":                        "profiles.a.box",
		"profiles:\n  a: {tenants: [app], http: {allow: [\"*x.example.com\"]}}\n":       "profiles.a.http",
		"profiles:\n  a: {tenants: [app], http: {ports: [\"443\"]}}\n":                  "profiles.a.http: allow_ip_literals, ports and trust need allow",
		"profiles:\n  a: {tenants: [app], mcp_servers: {m: {command: [x], typo: 1}}}\n": "profiles.a.mcp_servers",
		"profiles:\n  a: {tenants: [app], typo: 1}\n":                                   "typo",
	} {
		err, _ := load(body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want it to name %q", body, err, want)
		}
	}
}
