package doccheck

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGuidesRun runs the guides' code for real (make docs; GLOVEBOX_DOCS
// set to a comma-separated list such as docs/mcp.md,README.md runs only
// those guides' blocks, the Go blocks always): every Go block
// checked against its compiled source or compiled as pasted, every shell
// block run in order in its guide's own directory against the glovebox
// built from this checkout, every data block parsed (and written where a
// later block reads it). A failure names the guide's file:line and the
// command. It ends with the counts and every skipped block with its
// reason.
func TestGuidesRun(t *testing.T) {
	only := os.Getenv("GLOVEBOX_DOCS")
	if only == "" {
		t.Skip("runs every guide's code, about two minutes: make docs (GLOVEBOX_DOCS=1)")
	}
	rootAbs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// One directory per checkout, the same from run to run (see Runner.Work).
	work := filepath.Join(os.TempDir(), fmt.Sprintf("glovebox-docs-%x", sha256.Sum256([]byte(rootAbs)))[:len("glovebox-docs-")+12])
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(work+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	start := time.Now()
	bin := filepath.Join(work, "bin")
	build := exec.Command(goBin(), "build", "-o", filepath.Join(bin, "glovebox"), "./cmd/glovebox")
	build.Dir = rootAbs
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/glovebox: %v\n%s", err, out)
	}
	setup := exec.Command(filepath.Join(bin, "glovebox"), "setup")
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("glovebox setup: %v\n%s", err, out)
	}
	t.Logf("built glovebox and checked its image: %v", time.Since(start).Round(time.Millisecond))

	guides, err := Guides(rootAbs)
	if err != nil {
		t.Fatal(err)
	}
	var all []Report
	var blocks []Block
	for _, g := range guides {
		bs, err := Read(g)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	t.Run("go", func(t *testing.T) {
		start := time.Now()
		reps := CheckGo(ctx, rootAbs, filepath.Join(work, "gomod"), blocks)
		for _, r := range reps {
			if r.Err != nil {
				t.Error(r.Err)
			}
		}
		all = append(all, reps...)
		t.Logf("%d Go blocks: %v", len(reps), time.Since(start).Round(time.Millisecond))
	})

	r := &Runner{
		Root:     rootAbs,
		Bin:      bin,
		Work:     work,
		Checkout: map[string]bool{"README.md": true},
		Timeout:  60 * time.Second,
	}
	for _, g := range guides {
		name, _ := filepath.Rel(rootAbs, g)
		if only != "1" && !slices.Contains(strings.Split(only, ","), name) {
			continue // GLOVEBOX_DOCS=docs/mcp.md,README.md runs those alone
		}
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			reps, err := r.Guide(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			for _, rep := range reps {
				if rep.Err != nil {
					t.Error(rep.Err)
				}
			}
			all = append(all, reps...)
			t.Logf("%s: %v", name, time.Since(start).Round(time.Millisecond))
		})
	}
	t.Log(Summary(rootAbs, all) + fmt.Sprintf("\nin %v", time.Since(start).Round(time.Second)))
}

// Summary counts the reports by kind and lists the skipped blocks with
// their reasons, and the failed ones.
func Summary(root string, reps []Report) string {
	count := map[string]int{}
	commands := 0
	var skips, fails []string
	for _, r := range reps {
		count[r.Kind]++
		commands += r.Commands
		where := fmt.Sprintf("%s:%d", rel(root, r.Block.File), r.Block.Line)
		if r.Kind == KindSkipped {
			skips = append(skips, fmt.Sprintf("\t%s (%s): %s", where, r.Block.Lang, r.Skip))
		}
		if r.Err != nil {
			fails = append(fails, "\t"+where)
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "guides' code blocks: %d\n", len(reps))
	fmt.Fprintf(&s, "\tshell blocks run: %d (%d commands), transcripts compared: %d, servers started and stopped: %d, JSON-RPC sessions played: %d\n", count[KindRun], commands, count[KindTranscript], count[KindServer], count[KindSession])
	fmt.Fprintf(&s, "\tGo blocks: %d verbatim excerpts of compiled files, %d compiled as pasted\n", count[KindExcerpt], count[KindCompiled])
	fmt.Fprintf(&s, "\tdata blocks: %d parsed and written for later blocks, %d parsed\n", count[KindFile], count[KindParsed])
	fmt.Fprintf(&s, "\tnot code: %d text blocks (output, transcripts); %d Ruby blocks (ruby/test/test_docs.rb)\n", count[KindText], count[KindRuby])
	fmt.Fprintf(&s, "\tskipped: %d\n", count[KindSkipped])
	sort.Strings(skips)
	for _, l := range skips {
		s.WriteString(l + "\n")
	}
	fmt.Fprintf(&s, "\tfailed: %d\n", len(fails))
	for _, l := range fails {
		s.WriteString(l + "\n")
	}
	return strings.TrimRight(s.String(), "\n")
}
