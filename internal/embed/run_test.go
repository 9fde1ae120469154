package embed

import (
	"errors"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
)

// TestE2BURLs: the hosted backend's key crosses a network only over
// https; plain http is for a loopback development server.
func TestE2BURLs(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://api.e2b.dev": true, "http://127.0.0.1:8080": true, "http://[::1]:1": true, "http://localhost:9": true,
		"http://10.0.0.1": false, "http://api.e2b.dev": false, "ftp://x": false, "not a url": false, "": false,
	} {
		if err := checkServiceURL(u); (err == nil) != ok {
			t.Errorf("checkServiceURL(%q) = %v, want ok %v", u, err, ok)
		}
	}
	_, err := (&e2bSpec{APIKey: "k", APIURL: "http://10.1.2.3"}).box()
	if !errors.Is(err, box.ErrInvalidCommand) {
		t.Errorf("a plain-http API off loopback: %v, want ErrInvalidCommand", err)
	}
	_, err = (&e2bSpec{}).box()
	if !errors.Is(err, box.ErrInvalidCommand) {
		t.Errorf("no key: %v, want ErrInvalidCommand", err)
	}
	b, err := (&e2bSpec{APIKey: "k"}).box()
	if err != nil || b.Posture().Trust != box.TrustVendor {
		t.Errorf("E2B's public API: %v, %v", b, err)
	}
}
