package gvisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

// TestGVisorStartFailure: runsc failing to start the sandbox (here an
// unknown --platform) is an error wrapping box.ErrBackend that quotes
// runsc, not a Result with runsc's text as the command's stderr.
func TestGVisorStartFailure(t *testing.T) {
	requiresRunsc(t)
	b, err := gvisor.New(gvisor.Config{Platform: "no-such-platform"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"true"}})
	if !errors.Is(err, box.ErrBackend) || res != nil {
		t.Fatalf("Run = %+v, %v; want an error wrapping ErrBackend", res, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "unknown platform: no-such-platform") || !strings.Contains(msg, "runsc") {
		t.Errorf("error %q does not quote runsc", msg)
	}
}

// TestGVisorRunscGone: runsc vanishing between New and Run is an
// ErrBackend error, not a command exit status (127 is "command not
// found").
func TestGVisorRunscGone(t *testing.T) {
	requiresRunsc(t)
	p := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := gvisor.New(gvisor.Config{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"true"}})
	if !errors.Is(err, box.ErrBackend) || res != nil {
		t.Fatalf("Run = %+v, %v; want an error wrapping ErrBackend", res, err)
	}
}
