package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/container"
	"github.com/gloveboxhq/glovebox/box/e2b"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/box/microvm"
	"github.com/gloveboxhq/glovebox/httptool"
)

// backendFlags are the settings of the boxes glovebox run drives through
// another program or service: hardened containers (docker, podman),
// Firecracker microVMs and E2B's hosted sandboxes. Each has a box.* profile
// key of the same name.
type backendFlags struct {
	image, kernel, rootfs, template, e2bURL string
}

// e2bAPIURL is E2B's public control API (its documentation's base URL).
const e2bAPIURL = "https://api.e2b.dev"

// e2bKeyEnv names the environment variable holding the E2B API key; the
// key is read when a run starts and never printed.
const e2bKeyEnv = "E2B_API_KEY"

var backendProfileKeys = []struct{ key, flag, doc string }{
	{"box.image", "--image", "docker/podman: the container image the command runs in (required for those backends)"},
	{"box.kernel", "--kernel", "firecracker: the guest kernel (vmlinux), a host path"},
	{"box.rootfs", "--rootfs", "firecracker: the guest root file system image, a host path (attached read-only)"},
	{"box.template", "--template", "e2b: the sandbox template (base)"},
	{"box.e2b_url", "--e2b-url", "e2b: the control API (E2B's public one); the key comes from $" + e2bKeyEnv},
}

func (b *backendFlags) add(f *pflag.FlagSet) {
	f.StringVar(&b.image, "image", "", "docker/podman: the container image, such as python:3.12-slim")
	f.StringVar(&b.kernel, "kernel", "", "firecracker: the guest kernel (vmlinux) path")
	f.StringVar(&b.rootfs, "rootfs", "", "firecracker: the guest root file system image path")
	f.StringVar(&b.template, "template", "", "e2b: the sandbox template (default base)")
	f.StringVar(&b.e2bURL, "e2b-url", "", "e2b: the control API URL (default E2B's public API); the key comes from $"+e2bKeyEnv)
}

// over returns b with the profile's values where no flag was given.
func (b backendFlags) over(f *pflag.FlagSet, p boxProfile) backendFlags {
	pick := func(flag, v, pv string) string {
		if f.Changed(flag) || pv == "" {
			return v
		}
		return pv
	}
	b.image = pick("image", b.image, p.Image)
	b.kernel = pick("kernel", b.kernel, p.Kernel)
	b.rootfs = pick("rootfs", b.rootfs, p.Rootfs)
	b.template = pick("template", b.template, p.Template)
	b.e2bURL = pick("e2b-url", b.e2bURL, p.E2BURL)
	return b
}

// newOtherBox makes the docker, podman, firecracker or e2b box, or returns
// ok false for another name. Errors name the flag to give.
func newOtherBox(name string, base httptool.Config, b backendFlags) (box.Box, bool, error) {
	switch name {
	case "docker", "podman":
		if b.image == "" {
			return nil, true, usageError{fmt.Errorf("--box %s needs --image (the container image the command runs in, such as python:3.12-slim)", name)}
		}
		bx, err := container.New(container.Config{Engine: name, Image: b.image, Egress: egress.HTTPTool(base)})
		return bx, true, err
	case "firecracker":
		if b.kernel == "" || b.rootfs == "" {
			return nil, true, usageError{errors.New("--box firecracker needs --kernel (a vmlinux) and --rootfs (a root file system image)")}
		}
		// No runner: the CLI has no VM launcher of its own yet, so a run
		// fails with box.ErrUnavailable saying so (see box/microvm).
		bx, err := microvm.New(microvm.Config{Kernel: b.kernel, Rootfs: b.rootfs})
		return bx, true, err
	case "e2b":
		if os.Getenv(e2bKeyEnv) == "" {
			return nil, true, usageError{fmt.Errorf("--box e2b needs an API key in $%s", e2bKeyEnv)}
		}
		url := b.e2bURL
		if url == "" {
			url = e2bAPIURL
		}
		if !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://127.0.0.1") && !strings.HasPrefix(url, "http://localhost") {
			return nil, true, usageError{fmt.Errorf("--e2b-url %q: want an https:// URL (plain http only on loopback)", url)}
		}
		bx, err := e2b.New(e2b.Config{APIURL: url, Template: b.template, APIKey: func(context.Context) (string, error) {
			if k := os.Getenv(e2bKeyEnv); k != "" {
				return k, nil
			}
			return "", fmt.Errorf("$%s is empty", e2bKeyEnv)
		}})
		return bx, true, err
	}
	return nil, false, nil
}
