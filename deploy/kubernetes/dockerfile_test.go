package kubernetes

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/image"
)

// TestDockerfile checks the image build file the manifests run: a
// multi-stage build with cgo, the Ruby image pinned to the same version
// and hash as internal/image, the cache baked where the init container
// copies it from, and a non-root numeric user at the end.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	arg := func(name string) string {
		m := regexp.MustCompile(`(?m)^ARG ` + name + `=(\S+)$`).FindStringSubmatch(df)
		if m == nil {
			t.Errorf("Dockerfile: no ARG %s", name)
			return ""
		}
		return m[1]
	}
	if got := arg("RUBY_PACKAGE"); got != image.Package {
		t.Errorf("Dockerfile fetches %s, internal/image pins %s", got, image.Package)
	}
	if got := arg("RUBY_VERSION"); got != image.Version {
		t.Errorf("Dockerfile fetches version %s, internal/image pins %s", got, image.Version)
	}
	if got := arg("RUBY_SHA256"); got != image.SHA256 {
		t.Errorf("Dockerfile checks sha256 %s, internal/image pins %s", got, image.SHA256)
	}
	if n := len(regexp.MustCompile(`(?m)^FROM `).FindAllString(df, -1)); n < 3 {
		t.Errorf("%d stages; want the guest fetch, the cgo build and a runtime apart", n)
	}
	if !strings.Contains(df, "CGO_ENABLED=1 go build") {
		t.Error("the build does not enable cgo (wasmtime needs it)")
	}
	users := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindAllStringSubmatch(df, -1)
	if len(users) == 0 || users[len(users)-1][1] == "0" || users[len(users)-1][2] == "0" {
		t.Errorf("the runtime stage's last USER is not a numeric non-root user: %v", users)
	}
	ss, _ := os.ReadFile("statefulset.yaml")
	for _, p := range []string{"/opt/glovebox/cache", "/opt/glovebox/ruby+stdlib.wasm"} {
		if !strings.Contains(df, p) || !strings.Contains(string(ss), p) {
			t.Errorf("%s is not both baked by the Dockerfile and used by the StatefulSet", p)
		}
	}
	if !strings.Contains(string(ss), "runAsUser: "+users[len(users)-1][1]) {
		t.Errorf("the StatefulSet's runAsUser is not the image's user %s", users[len(users)-1][1])
	}
}
