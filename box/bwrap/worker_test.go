package bwrap_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/bwrap"
)

// TestWorkerKilledAtOnceLeavesNothing: a worker killed right after it
// started — while bwrap is still setting up its sandbox, before the
// sandbox's init has asked to die with its parent — leaves no process
// behind.
func TestWorkerKilledAtOnceLeavesNothing(t *testing.T) {
	b := requiresBwrap(t)
	marker := fmt.Sprintf("glovebox-worker-test-%d", os.Getpid())
	for i := range 60 {
		w, err := b.StartWorker(bwrap.WorkerSpec{Argv: []string{"/bin/sleep", "1000", marker}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%12) * 250 * time.Microsecond) // kill at every stage of bwrap's set-up
		w.Kill()
		w.Wait()
		if s := boxtest.HostProcesses(marker); len(s) > 0 {
			t.Fatalf("round %d: processes left: %q", i, s)
		}
	}
}
