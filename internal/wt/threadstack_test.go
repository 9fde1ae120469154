package wt

import "testing"

func TestDefaultThreadStack(t *testing.T) {
	s := DefaultThreadStack()
	if s < 64<<10 {
		t.Fatalf("DefaultThreadStack() = %d, want the C library's default thread stack (at least 64 KiB)", s)
	}
	t.Logf("default thread stack: %d bytes", s)
}
