package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDamagedStoreRefused: a copy of a store with its header smashed, or
// with one page in the middle overwritten, is refused at open (so New
// and `glovebox executor` do not start on it) with a message naming the
// file and what to do; the undamaged original still opens.
func TestDamagedStoreRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store.db")
	st, err := openStore(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := []byte(`{"state":"completed","result":{"stdout":"` + strings.Repeat("x", 3000) + `"}}`)
	for i := range 400 {
		k := fmt.Sprintf("k%04d", i)
		if _, _, err := st.begin(context.Background(), &entry{Tenant: "a", Key: k, Kind: "run", Hash: "h", State: "running", Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := st.finish(context.Background(), "a", k, "completed", true, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.close(); err != nil { // the last close checkpoints the WAL into the file
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 64*4096 {
		t.Fatalf("the store is only %d bytes", len(data))
	}
	for _, c := range []struct {
		name string
		harm func(b []byte)
	}{
		{"header", func(b []byte) { copy(b, "not a database!!") }},
		{"page in the middle", func(b []byte) {
			at := len(b) / 4096 / 2 * 4096
			for i := at; i < at+4096; i++ {
				b[i] = 0x5a
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), data...)
			c.harm(b)
			p := filepath.Join(t.TempDir(), "copy.db")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := openStore(p)
			if err == nil {
				s.close()
				t.Fatal("a damaged store opened")
			}
			for _, want := range []string{p, "is damaged", "restore it from a backup", ".recover", "start on a new file"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal lacks %q: %v", want, err)
				}
			}
		})
	}
	s, err := openStore(path)
	if err != nil {
		t.Fatalf("the undamaged store: %v", err)
	}
	s.close()
}
