package microvm_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/microvm"
)

func TestJailerArgsGolden(t *testing.T) {
	b, err := microvm.New(microvm.Config{Kernel: "/k/vmlinux", Rootfs: "/k/rootfs.ext4"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(b.JailerArgs("vm1", &box.Command{Argv: []string{"true"}, Limits: box.Limits{Memory: 256 << 20, Pids: 50}}), " ")
	want := "jailer --id vm1 --exec-file firecracker --uid 65534 --gid 65534 --chroot-base-dir /srv/jailer --new-pid-ns" +
		" --cgroup-version 2 --cgroup memory.max=335544320 --cgroup pids.max=50 --resource-limit fsize=268435456" +
		" --resource-limit no-file=1024 -- --config-file config.json --no-api"
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

func TestMachineConfig(t *testing.T) {
	b, _ := microvm.New(microvm.Config{Kernel: "/k", Rootfs: "/r"})
	raw, err := b.MachineConfig(&box.Command{Shell: "echo hi", Limits: box.Limits{Memory: 64 << 20, CPUs: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Boot struct {
			Args string `json:"boot_args"`
		} `json:"boot-source"`
		Drives []struct {
			RO   bool `json:"is_read_only"`
			Root bool `json:"is_root_device"`
		} `json:"drives"`
		Machine struct {
			VCPU int `json:"vcpu_count"`
			Mem  int `json:"mem_size_mib"`
		} `json:"machine-config"`
		Net []any `json:"network-interfaces"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Machine.VCPU != 2 || cfg.Machine.Mem != 128 || len(cfg.Drives) != 1 || !cfg.Drives[0].RO || !cfg.Drives[0].Root || cfg.Net != nil {
		t.Errorf("%s", raw)
	}
	i := strings.Index(cfg.Boot.Args, "glovebox.cmd=")
	argv, _ := base64.StdEncoding.DecodeString(cfg.Boot.Args[i+len("glovebox.cmd="):])
	if string(argv) != `["/bin/sh","-c","echo hi"]` {
		t.Errorf("cmd %s", argv)
	}
}

func TestRunnerContract(t *testing.T) {
	b, _ := microvm.New(microvm.Config{Kernel: "/k", Rootfs: "/r"})
	if _, err := b.Run(context.Background(), box.Command{Argv: []string{"x"}}); !errors.Is(err, box.ErrUnavailable) {
		t.Errorf("default runner: %v", err)
	}
	var gotArgs []string
	b, _ = microvm.New(microvm.Config{Kernel: "/k", Rootfs: "/r", Runner: func(ctx context.Context, a []string, cfg []byte, c *box.Command) (*box.Result, error) {
		gotArgs = a
		return &box.Result{Stdout: "hi\n"}, nil
	}})
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"x"}})
	if err != nil || res.Trust != box.TrustVM || res.OffHost() || gotArgs[0] != "jailer" {
		t.Errorf("%+v %v", res, err)
	}
}

// TestConformance runs the box contract against the microVM box with a
// fake runner (no KVM or Firecracker here).
func TestConformance(t *testing.T) {
	boxtest.Run(t, boxtest.Backend{
		Name: "microvm",
		New: func(t *testing.T) box.Box {
			b, err := microvm.New(microvm.Config{Kernel: "/k", Rootfs: "/r", Runner: func(ctx context.Context, a []string, cfg []byte, c *box.Command) (*box.Result, error) {
				return &box.Result{}, nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Posture: box.Posture{Backend: "firecracker", Isolation: box.IsolationMicroVM, Trust: box.TrustVM},
		Cannot:  boxtest.Fake("a fake runner stands in for the jailer and Firecracker"),
	})
}
