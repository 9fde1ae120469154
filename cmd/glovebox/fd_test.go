package main

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
)

// TestRunInheritsNoDescriptors: a file and a directory the CLI inherits
// without close-on-exec (bash -c 'exec 40<f 41<d; glovebox run …') reach
// the command on neither OS tier: it cannot read the file through
// /proc/self/fd nor create a file through the directory descriptor.
func TestRunInheritsNoDescriptors(t *testing.T) {
	for _, tier := range []string{"bwrap", "gvisor"} {
		if _, err := exec.LookPath(map[string]string{"bwrap": "bwrap", "gvisor": "runsc"}[tier]); err != nil {
			t.Logf("%s is not installed: skipped", tier)
			continue
		}
		p := spawntest.Plant(t)
		cmd := exec.Command(bin, "run", "--box", tier, "--json", "--", "/bin/sh", "-c", p.Probe())
		cmd.ExtraFiles = p.ExtraFiles(t)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tier, err, out)
		}
		var res struct{ Stdout, Stderr string }
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("%s: %v: %s", tier, err, out)
		}
		p.Check(t, "glovebox run --box "+tier, res.Stdout+res.Stderr)
	}
}
