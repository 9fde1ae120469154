package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMCPFlagsParse(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "p.yaml")
	os.WriteFile(prof, []byte(`limits: {timeout: 5s}
mcp_servers:
  mem:
    command: [npx, -y, "@modelcontextprotocol/server-memory"]
    env: {MEMORY_FILE_PATH: /tmp/m.jsonl}
  remote:
    url: http://127.0.0.1:9/mcp
    headers: {Authorization: "Bearer ${MCPFLAGS_TEST_TOKEN}"}
`), 0o600)
	t.Setenv("MCPFLAGS_TEST_TOKEN", "tok")
	m := mcpFlags{servers: []string{"mem=my-memory --flag", "fs=srv /tmp"}}
	got, err := m.parse(prof)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "mem,remote,fs" {
		t.Fatalf("order %v", names)
	}
	if strings.Join(got[0].Command, " ") != "my-memory --flag" || got[0].Env != nil {
		t.Fatalf("a flag replaces the profile's server of the same name: %+v", got[0])
	}
	if got[1].Header.Get("Authorization") != "Bearer tok" {
		t.Fatalf("header %v", got[1].Header)
	}
	// The whole profile still loads with the section in it.
	if _, _, err := loadProfile(prof); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []mcpFlags{{servers: []string{"nocommand"}}, {servers: []string{"x="}}, {urls: []string{"x"}}} {
		if _, err := bad.parse(""); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
