// Package microvm runs commands in Firecracker microVMs: a guest kernel
// under KVM, started by the jailer. It builds the VM's configuration file
// and the jailer's arguments from a Command; the VM itself is started by
// an injectable [Runner]. Kernel and root file system are the caller's;
// the guest is expected to run the command given on the kernel command
// line (glovebox.cmd=<base64 argv JSON>) and report on the serial console.
//
// The default Runner refuses: on the machine this was written on, /dev/kvm
// exists but a guest kernel did not get past early boot, so no boot path
// has been verified. Inject one that does.
package microvm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gloveboxhq/glovebox/box"
)

// Config is a microVM box's set-up.
type Config struct {
	Kernel string // guest kernel image (vmlinux), host path; required
	Rootfs string // root file system image, host path; required (attached read-only)
	// Jailer and Firecracker are the binaries; empty means "jailer" and
	// "firecracker".
	Jailer, Firecracker string
	// UID and GID the jailer drops to; zero means 65534.
	UID, GID int
	// ChrootBase is the jailer's --chroot-base-dir; empty means /srv/jailer.
	ChrootBase string
	// Runner boots the VM; nil refuses every run with ErrUnavailable.
	Runner Runner
}

// Runner boots one VM: jailerArgs start it, config is the file given as
// --config-file (inside the jail), c the command. It returns the Result.
type Runner func(ctx context.Context, jailerArgs []string, config []byte, c *box.Command) (*box.Result, error)

// Box is a microVM box; make it with [New].
type Box struct{ cfg Config }

var _ box.Box = (*Box)(nil)

// New checks cfg.
func New(cfg Config) (*Box, error) {
	if cfg.Kernel == "" || cfg.Rootfs == "" {
		return nil, fmt.Errorf("%w: a kernel and a root file system are required", box.ErrInvalidCommand)
	}
	if cfg.Jailer == "" {
		cfg.Jailer = "jailer"
	}
	if cfg.Firecracker == "" {
		cfg.Firecracker = "firecracker"
	}
	if cfg.UID == 0 {
		cfg.UID = 65534
	}
	if cfg.GID == 0 {
		cfg.GID = 65534
	}
	if cfg.ChrootBase == "" {
		cfg.ChrootBase = "/srv/jailer"
	}
	return &Box{cfg: cfg}, nil
}

// Posture is (microvm, vm).
func (b *Box) Posture() box.Posture {
	return box.Posture{Backend: "firecracker", Isolation: box.IsolationMicroVM, Trust: box.TrustVM}
}

// MachineConfig is the Firecracker --config-file for c: one vCPU per
// started core of Limits.CPUs (at least 1), Limits.Memory in MiB (at least
// 128), the kernel, the root file system read-only, and no network
// interface (Firecracker adds none unless configured).
func (b *Box) MachineConfig(c *box.Command) ([]byte, error) {
	l := c.Limits.WithDefaults()
	vcpus := max(1, int(l.CPUs+0.999))
	mem := max(128, l.Memory>>20)
	argv, err := json.Marshal(c.ArgvOrShell())
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"boot-source": map[string]any{
			"kernel_image_path": "vmlinux",
			"boot_args":         "console=ttyS0 reboot=k panic=1 pci=off ro glovebox.cmd=" + base64.StdEncoding.EncodeToString(argv),
		},
		"drives": []any{map[string]any{
			"drive_id": "rootfs", "path_on_host": "rootfs.ext4", "is_root_device": true, "is_read_only": true,
		}},
		"machine-config": map[string]any{"vcpu_count": vcpus, "mem_size_mib": mem, "smt": false},
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// JailerArgs are the jailer's arguments for VM id: its own PID namespace
// (the VM has no network interface: MachineConfig configures none), the unprivileged
// uid/gid, cgroup limits, and Firecracker's arguments after "--".
func (b *Box) JailerArgs(id string, c *box.Command) []string {
	l := c.Limits.WithDefaults()
	return []string{b.cfg.Jailer,
		"--id", id,
		"--exec-file", b.cfg.Firecracker,
		"--uid", strconv.Itoa(b.cfg.UID), "--gid", strconv.Itoa(b.cfg.GID),
		"--chroot-base-dir", b.cfg.ChrootBase,
		"--new-pid-ns",
		"--cgroup-version", "2",
		"--cgroup", "memory.max=" + strconv.FormatInt(l.Memory+(64<<20), 10),
		"--cgroup", "pids.max=" + strconv.Itoa(l.Pids),
		"--resource-limit", "fsize=" + strconv.FormatInt(l.Disk, 10),
		"--resource-limit", "no-file=1024",
		"--",
		"--config-file", "config.json",
		"--no-api",
	}
}

// Run builds the configuration and hands it to the Runner.
func (b *Box) Run(ctx context.Context, c box.Command) (*box.Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.Network.Allow) > 0 || c.Tools != nil || len(c.Files) > 0 || len(c.Mounts) > 0 {
		return nil, fmt.Errorf("%w: the microVM box has no network, tool socket, file transfer or host mounts yet", box.ErrUnsupported)
	}
	if b.cfg.Runner == nil {
		return nil, fmt.Errorf("%w: no microVM runner (no verified boot path on this host; inject Config.Runner)", box.ErrUnavailable)
	}
	cfg, err := b.MachineConfig(&c)
	if err != nil {
		return nil, err
	}
	res, err := b.cfg.Runner(ctx, b.JailerArgs("glovebox-vm", &c), cfg, &c)
	if err != nil {
		return nil, err
	}
	res.Posture = b.Posture()
	return res, nil
}
