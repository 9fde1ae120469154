package engine

import (
	"context"
	"fmt"
	"testing"
)

// TestSessionCaptureRestore: a session's state captured in one pool and
// restored in another (each with its own VMs) carries its variables,
// methods, heap and random generator.
func TestSessionCaptureRestore(t *testing.T) {
	ctx := context.Background()
	pa, err := testEngine.NewPool(ctx, 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	pb, err := testEngine.NewPool(ctx, 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	run := func(s *Session, code string) any {
		t.Helper()
		out, _, err := s.Eval(ctx, &Request{Code: code, Limits: testLimits})
		if err != nil || out.Status != StatusOK {
			t.Fatalf("%q: %v %+v %+v", code, err, out, out.Error)
		}
		return out.Value
	}
	for _, big := range []bool{false, true} {
		a, _ := pa.NewSession()
		setup := `x = 41; def f(y) = y * 2; $s = "ab" * 10; srand(7); rand(1000)`
		if big {
			setup = `x = 41; def f(y) = y * 2; $s = "ab" * 5_000_000; srand(7); rand(1000)`
		}
		run(a, setup)
		st, err := a.Capture(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("big=%v: state %d bytes", big, len(st))
		want := run(a, `[x, f(x), $s.size, rand(1_000_000)]`)
		a.Close()
		b, err := pb.RestoreSession(st)
		if err != nil {
			t.Fatal(err)
		}
		got := run(b, `[x, f(x), $s.size, rand(1_000_000)]`)
		b.Close()
		if !sameValue(got, want) {
			t.Fatalf("restored %v, straight %v", got, want)
		}
	}
}

func sameValue(a, b any) bool { return fmt.Sprint(normal(a)) == fmt.Sprint(normal(b)) }

// TestSnapshotGlobalsOrdered: every load of a cached snapshot lists its
// globals alike (the module's order). A session's state carries their
// values by position and its prepared VM's hash combines them in order;
// loaded in a map's order, a state made by one Runtime was refused by
// the next as "taken against another prepared VM", or restored with its
// globals swapped (the VM crashed).
func TestSnapshotGlobalsOrdered(t *testing.T) {
	want := fmt.Sprint(testEngine.base.globals)
	for range 20 {
		s, err := testEngine.loadSnapshot(testEngine.base.dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(s.globals)
		s.img.Close()
		if got != want {
			t.Fatalf("a load listed the globals as %s, another as %s", got, want)
		}
	}
}

// FuzzSessionState: no bytes make the session-state decoder panic, and
// what it accepts is within bounds (pages inside memory, data to match).
func FuzzSessionState(f *testing.F) {
	f.Add([]byte{stateVersion, 0})
	seed := []byte{stateVersion, flagVM | flagCheckpoint, 1, 2, 3, 4, 5, 6, 7, 8, 0x80, 0x80, 0x04, 1}
	seed = append(seed, make([]byte, 8)...)
	seed = append(seed, 5, 1, 1, 0)
	seed = append(seed, make([]byte, 4096)...)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeSessionState(b, 1)
		if err != nil {
			return
		}
		if st.flags&flagVM == 0 {
			return
		}
		if len(st.data) != len(st.pages)*4096 {
			t.Fatalf("%d pages, %d bytes", len(st.pages), len(st.data))
		}
		for _, p := range st.pages {
			if uint64(p+1)*4096 > st.memLen {
				t.Fatalf("page %d outside %d bytes", p, st.memLen)
			}
		}
	})
}

// TestRunShares: the shares of a capture's written pages hold every page
// once, in order, each share starting where its index says.
func TestRunShares(t *testing.T) {
	runs := []uint64{3, 100, 200, 1, 300, 250, 1000, 7}
	total := 100 + 1 + 250 + 7
	var got []uint64
	at := 0
	for _, sh := range runShares(runs, total) {
		if sh.first != at {
			t.Fatalf("a share starts at %d, after %d pages", sh.first, at)
		}
		for j := 0; j < len(sh.runs); j += 2 {
			for p := sh.runs[j]; p < sh.runs[j]+sh.runs[j+1]; p++ {
				got = append(got, p)
			}
			at += int(sh.runs[j+1])
		}
	}
	var want []uint64
	for j := 0; j < len(runs); j += 2 {
		for p := runs[j]; p < runs[j]+runs[j+1]; p++ {
			want = append(want, p)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("shares hold %v, want %v", got, want)
	}
}
