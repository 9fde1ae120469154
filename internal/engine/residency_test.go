package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// vmPages reads /proc/self/pagemap for v's linear memory image
// range: how many of its 4 KiB pages are present (mapped in the page
// table: touched since the range was mapped), and how many of those are
// the VM's own copies (written, copied on write) rather than the image
// file's page.
func vmPages(t *testing.T, v *VM) (present, written int) {
	t.Helper()
	if _, n := v.inst.MemoryRange(); n == 0 {
		t.Fatal("the VM's memory is not made from an image")
	}
	for _, e := range pagemap(t, v) {
		if e&pmPresent != 0 {
			present++
			if e&pmFile == 0 {
				written++
			}
		}
	}
	return present, written
}

// poolPages takes a VM from p as its next eval would get it, reads its
// residency (vmPages) and frees it.
func poolPages(t *testing.T, p *Pool) (present, written int) {
	t.Helper()
	v, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	return vmPages(t, v)
}

// TestNoReuseMemoryFaultsAsNew: a VM made for an eval of a pool with
// reuse disabled gets linear memory in which no page an earlier eval
// wrote is resident, so the eval's first writes fault as in a VM never
// used and their timing tells nothing of earlier evals (issue 22, A5).
// Before, a freed VM's memory was reset by copying the image's bytes back
// into the pages it wrote: the bytes were the snapshot's, but what an
// earlier eval wrote stayed resident and took no fault when written
// again. The check reads the page table (/proc/self/pagemap), not a
// timing: the VM after a 12 MiB eval must have as many present and
// written pages as a new VM, and a VM of a
// pool that reuses, taking the memory such a VM left, must too.
func TestNoReuseMemoryFaultsAsNew(t *testing.T) {
	ctx := context.Background()
	noReuse, err := testEngine.NewPool(ctx, 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer noReuse.Close()
	noReuse.DisableReuse()
	reuse, err := testEngine.NewPool(ctx, 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer reuse.Close()

	look := func(p *Pool) (int, int) { return poolPages(t, p) }
	const wrote = 12 << 20 / 4096 // pages the big eval writes
	big := &Request{Code: "s = \"x\" * (12 << 20); s.bytesize", Limits: testLimits}
	p0, w0 := look(noReuse)
	for round := range 2 {
		out, err := noReuse.Eval(ctx, big)
		if err != nil || out.Status != StatusOK {
			t.Fatal(err, out)
		}
		p1, w1 := look(noReuse)
		t.Logf("round %d: a new VM has %d pages present, %d written; after the eval, %d and %d", round, p0, w0, p1, w1)
		if p1-p0 > wrote/4 || w1-w0 > wrote/4 {
			t.Errorf("round %d: the VM after a %d-page eval has %d present and %d written pages, a new VM %d and %d: the eval's pages stayed resident",
				round, wrote, p1, w1, p0, w0)
		}
		// A pool that reuses, on the same engine, takes the memory the
		// no-reuse pool's VM left (the most recently freed): it must not
		// show that eval's pages either.
		if _, err := noReuse.Eval(ctx, big); err != nil {
			t.Fatal(err)
		}
		p2, w2 := look(reuse)
		if p2-p0 > wrote/4 || w2-w0 > wrote/4 {
			t.Errorf("round %d: a reusing pool's VM, after the no-reuse pool's %d-page eval, has %d present and %d written pages (a new VM %d and %d)",
				round, wrote, p2, w2, p0, w0)
		}
	}
}

// TestMemoryGroupsKeepResidencyApart: a freed VM's memory is reset for a
// VM of its pool's memory group (its written pages stay resident: the
// reset's point) and mapped anew for a VM of another group, which so
// sees no page of the freed VM's eval resident (what the executor's
// tenants rely on, issue 22 A5). The eval is cut by its timeout, so
// that its VM is freed rather than rewound.
func TestMemoryGroupsKeepResidencyApart(t *testing.T) {
	ctx := context.Background()
	pools := map[uint64]*Pool{}
	for _, g := range []uint64{1, 2, wt.GroupFresh} {
		p, err := testEngine.NewPool(ctx, 0, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.SetMemoryGroup(g)
		pools[g] = p
	}
	look := func(p *Pool) (int, int) { return poolPages(t, p) }
	p0, w0 := look(pools[wt.GroupFresh])
	const wrote = 12 << 20 / 4096
	lim := testLimits
	lim.Timeout = 300 * time.Millisecond
	cut := &Request{Code: "s = \"x\" * (12 << 20); loop {}", Limits: lim}
	write := func() {
		out, err := pools[1].Eval(ctx, cut)
		if err != nil || out.Status != StatusTimeout {
			t.Fatal(err, out)
		}
	}
	write()
	p1, w1 := look(pools[2])
	t.Logf("a new VM: %d pages present, %d written; group 2 after group 1's eval: %d and %d", p0, w0, p1, w1)
	if p1-p0 > wrote/4 || w1-w0 > wrote/4 {
		t.Errorf("a VM of group 2, after group 1's %d-page eval, has %d present and %d written pages (a new VM %d and %d)", wrote, p1, w1, p0, w0)
	}
	write()
	p2, w2 := look(pools[1])
	t.Logf("group 1 after its own eval: %d and %d", p2, w2)
	if w2-w0 < wrote/2 {
		t.Errorf("a VM of group 1, after group 1's %d-page eval, has %d written pages (a new VM %d): its memory was not reset and reused", wrote, w2, w0)
	}
}

// TestRewoundVMKeepsItsGroup: a rewound VM stays in its pool's memory
// group. It lost it once (the rewind rebuilt the VM without it), and a
// pool's get then dropped every rewound VM its filler had readied as one
// of another group: a VM made per eval.
func TestRewoundVMKeepsItsGroup(t *testing.T) {
	p, err := testEngine.NewPool(context.Background(), 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetMemoryGroup(7)
	v, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	if out := v.run(context.Background(), &Request{Code: "1+1", Limits: testLimits}); out.Status != StatusOK {
		t.Fatal(out)
	}
	if err := v.rewind(); err != nil {
		t.Fatal(err)
	}
	if v.group != 7 {
		t.Errorf("a rewound VM of group 7 is in group %d", v.group)
	}
}
