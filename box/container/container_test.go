package container_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/container"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/httptool"
)

func TestArgsGolden(t *testing.T) {
	b, err := container.New(container.Config{Image: "python:3.12-slim", SeccompProfile: "/etc/gb-seccomp.json"})
	if err != nil {
		t.Fatal(err)
	}
	c := &box.Command{Argv: []string{"python3", "-c", "print(1)"}, Limits: box.Limits{Memory: 256 << 20, Pids: 64, CPUs: 0.5}}
	got := strings.Join(b.Args(c, "gb-1", "/tmp/w", []string{"PATH", "HOME"}), " ")
	want := "docker run --rm -i --name gb-1 --read-only --cap-drop ALL --security-opt no-new-privileges" +
		" --security-opt seccomp=/etc/gb-seccomp.json --network none --pids-limit 64 --memory 268435456 --memory-swap 268435456" +
		" --user 65534:65534 --tmpfs /tmp:rw,nosuid,nodev,noexec,size=268435456 --ulimit core=0 --ulimit fsize=268435456" +
		" -v /tmp/w:/work:rw -w /work --cpus 0.5 -e HOME -e PATH -- python:3.12-slim python3 -c print(1)"
	if got != want {
		t.Errorf("argv\n got %s\nwant %s", got, want)
	}
}

func TestHardeningFlags(t *testing.T) {
	for _, engine := range []string{"docker", "podman"} {
		b, _ := container.New(container.Config{Engine: engine, Image: "img"})
		a := b.Args(&box.Command{Shell: "true"}, "n", "/w", nil)
		pairs := [][2]string{{"--cap-drop", "ALL"}, {"--security-opt", "no-new-privileges"}, {"--network", "none"},
			{"--pids-limit", "128"}, {"--memory", "536870912"}, {"--user", "65534:65534"}}
		for _, p := range pairs {
			i := slices.Index(a, p[0])
			if i < 0 || a[i+1] != p[1] {
				t.Errorf("%s: missing %s %s in %v", engine, p[0], p[1], a)
			}
		}
		for _, f := range []string{"--read-only", "--rm"} {
			if !slices.Contains(a, f) {
				t.Errorf("%s: missing %s", engine, f)
			}
		}
		if i := slices.Index(a, "--tmpfs"); i < 0 || !strings.HasPrefix(a[i+1], "/tmp:") {
			t.Errorf("%s: no tmpfs /tmp", engine)
		}
		if slices.Contains(a, "seccomp=unconfined") {
			t.Errorf("%s: seccomp unconfined", engine)
		}
		if engine == "podman" && !slices.Contains(a, "auto") {
			t.Errorf("podman without --userns auto")
		}
	}
}

// TestRunnerContract runs the built argv through an injected runner that
// stands in for the engine, and checks the environment travels by name.
func TestRunnerContract(t *testing.T) {
	var argv []string
	b, _ := container.New(container.Config{Image: "img", Runner: func(ctx context.Context, a []string) *exec.Cmd {
		if a[1] == "rm" {
			return exec.Command("true")
		}
		argv = a
		return exec.Command("sh", "-c", `echo "$SECRET_NAME"; exit 4`)
	}})
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"x"}, Env: map[string]string{"SECRET_NAME": "v-91"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "v-91\n" || res.ExitStatus != 4 || res.Backend != "docker" {
		t.Errorf("%+v", res)
	}
	if strings.Contains(strings.Join(argv, " "), "v-91") || !slices.Contains(argv, "SECRET_NAME") {
		t.Errorf("env value in argv: %v", argv)
	}
}

// TestEgressArgv: with an allowlist, podman's argv joins the proxy's
// network namespace instead of none and the proxy variables travel by
// name; the proxy in that namespace answers with httptool's refusal for a
// host not allowed; docker refuses the allowlist, saying why.
func TestEgressArgv(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	var argv []string
	var refusal string
	b, _ := container.New(container.Config{Engine: "podman", Image: "img",
		Egress: egress.HTTPTool(httptool.Config{}),
		Runner: func(ctx context.Context, a []string) *exec.Cmd {
			if a[1] == "rm" {
				return exec.Command("true")
			}
			argv = a
			// Stand in for the engine: ask the proxy in the namespace.
			i := slices.Index(a, "--network")
			ns := strings.TrimPrefix(a[i+1], "ns:")
			return exec.Command("nsenter", "--net="+ns, "sh", "-c", `printf 'GET http://other.test/ HTTP/1.0\r\n\r\n' | python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",3128)); s.sendall(sys.stdin.buffer.read()); print(s.makefile("rb").read().decode().splitlines()[-1])'`)
		}})
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"x"}, Network: box.Network{Allow: []string{"allowed.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(argv, "--network")
	if i < 0 || !strings.HasPrefix(argv[i+1], "ns:/proc/") || !slices.Contains(argv, "HTTPS_PROXY") || !slices.Contains(argv, "HTTP_PROXY") {
		t.Errorf("argv %v", argv)
	}
	ht, _ := httptool.New(httptool.Config{AllowHosts: []string{"allowed.test"}})
	_, derr := ht.DialURL(context.Background(), "http://other.test/")
	refusal = "egress proxy: " + derr.Error()
	if strings.TrimSpace(res.Stdout) != refusal {
		t.Errorf("proxy said %q (stderr %q), want %q", res.Stdout, res.Stderr, refusal)
	}
	d, _ := container.New(container.Config{Image: "img", Egress: egress.HTTPTool(httptool.Config{})})
	if _, err := d.Run(context.Background(), box.Command{Argv: []string{"x"}, Network: box.Network{Allow: []string{"a.test"}}}); !errors.Is(err, box.ErrUnsupported) || !strings.Contains(err.Error(), "docker") {
		t.Errorf("docker with an allowlist: %v", err)
	}
}

func TestMountArgs(t *testing.T) {
	b, _ := container.New(container.Config{Image: "img"})
	a := strings.Join(b.Args(&box.Command{Argv: []string{"x"}, Mounts: []box.Mount{{HostPath: "/srv/in", GuestPath: "/data"}, {HostPath: "/srv/out", GuestPath: "/out", Writable: true}}}, "n", "/w", nil), " ")
	if !strings.Contains(a, "-v /srv/in:/data:ro -v /srv/out:/out:rw") {
		t.Errorf("argv %s", a)
	}
}

// TestConformance runs the box contract against the container box with a
// fake engine (no docker or podman here): what it checks without one.
func TestConformance(t *testing.T) {
	boxtest.Run(t, boxtest.Backend{
		Name: "container",
		New: func(t *testing.T) box.Box {
			b, err := container.New(container.Config{Image: "img", Runner: func(ctx context.Context, a []string) *exec.Cmd {
				return exec.Command("true") // the engine: every call succeeds, the command prints nothing
			}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Posture: box.Posture{Backend: "docker", Isolation: box.IsolationNamespaces, Trust: box.TrustHost},
		Cannot:  boxtest.Fake("a fake engine stands in for docker"),
	})
}
