package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runEnv runs the CLI with extra environment variables.
func runEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// glovebox run reaches the container backends: a fake docker on PATH
// records the argv it is given, which carries the hardening the container
// box builds, and its output is the run's.
func TestRunContainerBackendFromCLI(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "argv")
	// The box calls the engine more than once (run, then rm -f): keep all.
	fake := "#!/bin/sh\nprintf '%s\\n' \"$@\" >> " + record + "\necho from-fake-engine\n"
	for _, engine := range []string{"docker", "podman"} {
		if err := os.WriteFile(filepath.Join(dir, engine), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=" + dir + ":" + os.Getenv("PATH")}
	for _, engine := range []string{"docker", "podman"} {
		os.Remove(record)
		out, stderr, code := runEnv(t, env, "run", "--box", engine, "--image", "python:3.12-slim", "--", "python3", "-c", "print(1)")
		if code != 0 || !strings.Contains(out, "from-fake-engine") {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", engine, code, out, stderr)
		}
		b, err := os.ReadFile(record)
		if err != nil {
			t.Fatal(err)
		}
		argv := string(b)
		for _, want := range []string{"--read-only", "--cap-drop\nALL", "no-new-privileges", "--network\nnone", "python:3.12-slim\npython3\n-c\nprint(1)"} {
			if !strings.Contains(argv, want) {
				t.Errorf("%s argv lacks %q:\n%s", engine, want, argv)
			}
		}
	}
	// Profiles set the same keys.
	prof := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(prof, []byte("box:\n  backend: podman\n  image: alpine:3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(record)
	if out, stderr, code := runEnv(t, env, "run", "--profile", prof, "--", "true"); code != 0 || !strings.Contains(out, "from-fake-engine") {
		t.Fatalf("profile: exit %d, %q %q", code, out, stderr)
	}
	if b, _ := os.ReadFile(record); !strings.Contains(string(b), "alpine:3\ntrue") {
		t.Errorf("profile's image not used:\n%s", b)
	}
}

// Each backend that needs settings says which flag is missing, before any
// work, with exit status 2.
func TestRunOtherBackendsNeedTheirSettings(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--box", "docker"}, "--image"},
		{nil, []string{"--box", "firecracker"}, "--kernel"},
		{[]string{"E2B_API_KEY="}, []string{"--box", "e2b"}, "E2B_API_KEY"},
		{[]string{"E2B_API_KEY=k"}, []string{"--box", "e2b", "--e2b-url", "http://example.com"}, "https://"},
		{nil, []string{"--box", "firecracker", "--kernel", "/k", "--rootfs", "/r"}, "no microVM runner"},
		{nil, []string{"--box", "vmware"}, "docker, podman, firecracker, e2b"},
	} {
		_, stderr, code := runEnv(t, tc.env, append(append([]string{"run"}, tc.args...), "--", "true")...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
