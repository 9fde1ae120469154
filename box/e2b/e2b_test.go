package e2b_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/e2b"
)

const canary = "e2b_key_c4n4ry"

// fake follows the documented shapes of the control API and envd.
type fake struct {
	mu      sync.Mutex
	log     []string
	files   map[string]string
	process map[string]any
	hang    bool
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.log = append(f.log, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	if r.Header.Get("X-API-Key") != canary {
		http.Error(w, "no key", 401)
		return
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/sandboxes":
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		if body["templateID"] != "base" {
			http.Error(w, "template", 400)
			return
		}
		w.Write([]byte(`{"sandboxID":"sbx1","clientID":"c"}`))
	case r.Method == "DELETE" && r.URL.Path == "/sandboxes/sbx1":
		w.WriteHeader(204)
	case r.Method == "POST" && r.URL.Path == "/files":
		file, hdr, err := r.FormFile("file")
		if err != nil {
			http.Error(w, "form", 400)
			return
		}
		b, _ := io.ReadAll(file)
		f.mu.Lock()
		f.files[r.URL.Query().Get("path")] = hdr.Filename + ":" + string(b)
		f.mu.Unlock()
		w.Write([]byte(`[]`))
	case r.Method == "POST" && r.URL.Path == "/process.Process/Start":
		if r.Header.Get("Content-Type") != "application/connect+json" {
			http.Error(w, "ctype", 415)
			return
		}
		var hdr [5]byte
		io.ReadFull(r.Body, hdr[:])
		msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		io.ReadFull(r.Body, msg)
		var req map[string]any
		json.Unmarshal(msg, &req)
		f.mu.Lock()
		f.process = req["process"].(map[string]any)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/connect+json")
		send := func(flags byte, v string) {
			out := make([]byte, 5)
			out[0] = flags
			binary.BigEndian.PutUint32(out[1:], uint32(len(v)))
			w.Write(append(out, v...))
			w.(http.Flusher).Flush()
		}
		send(0, `{"event":{"start":{"pid":7}}}`)
		send(0, `{"event":{"data":{"stdout":"`+base64.StdEncoding.EncodeToString([]byte("4\n"))+`"}}}`)
		send(0, `{"event":{"data":{"stderr":"`+base64.StdEncoding.EncodeToString([]byte("warn\n"))+`"}}}`)
		if f.hang {
			<-r.Context().Done()
			return
		}
		send(0, `{"event":{"end":{"exitCode":3,"status":"exit status 3"}}}`)
		send(2, `{}`)
	default:
		http.Error(w, "not found", 404)
	}
}

func newBox(t *testing.T, f *fake) *e2b.Box {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	b, err := e2b.New(e2b.Config{APIURL: srv.URL, EnvdURL: func(id string) string { return srv.URL },
		APIKey: func(context.Context) (string, error) { return canary, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestE2BRun(t *testing.T) {
	f := &fake{files: map[string]string{}}
	b := newBox(t, f)
	if err := box.RequireOffHost(b); err != nil {
		t.Fatal(err)
	}
	res, err := b.Run(context.Background(), box.Command{Shell: "python3 -c 'print(2+2)'", Files: map[string][]byte{"d.txt": []byte("x")}, Env: map[string]string{"MODE": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "4\n" || res.Stderr != "warn\n" || res.ExitStatus != 3 || res.Trust != box.TrustVendor || !res.OffHost() {
		t.Errorf("%+v", res)
	}
	if f.files["/home/user/d.txt"] != "d.txt:x" {
		t.Errorf("files %v", f.files)
	}
	if f.process["cmd"] != "/bin/sh" || f.process["cwd"] != "/home/user" || f.process["envs"].(map[string]any)["MODE"] != "b" {
		t.Errorf("process %v", f.process)
	}
	want := "POST /sandboxes,POST /files,POST /process.Process/Start,DELETE /sandboxes/sbx1"
	if got := strings.Join(f.log, ","); got != want {
		t.Errorf("requests %s", got)
	}
	j, _ := json.Marshal(res)
	if strings.Contains(string(j), canary) {
		t.Errorf("key in result")
	}
}

func TestE2BTimeoutAndErrors(t *testing.T) {
	f := &fake{files: map[string]string{}, hang: true}
	b := newBox(t, f)
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"sleep", "9"}, Timeout: 300 * time.Millisecond})
	if err != nil || !res.TimedOut || res.ExitStatus != 124 || res.Stdout != "4\n" {
		t.Fatalf("%+v %v", res, err)
	}
	if f.log[len(f.log)-1] != "DELETE /sandboxes/sbx1" {
		t.Errorf("sandbox not killed: %v", f.log)
	}
	bad, _ := e2b.New(e2b.Config{APIURL: "http://127.0.0.1:1", APIKey: func(context.Context) (string, error) { return canary, nil }})
	_, err = bad.Run(context.Background(), box.Command{Argv: []string{"x"}})
	if err == nil || strings.Contains(err.Error(), canary) {
		t.Errorf("err %v", err)
	}
}

// TestConformance runs the box contract against the E2B box over the
// local fake of its control API and envd.
func TestConformance(t *testing.T) {
	boxtest.Run(t, boxtest.Backend{
		Name:    "e2b",
		New:     func(t *testing.T) box.Box { return newBox(t, &fake{files: map[string]string{}}) },
		Posture: box.Posture{Backend: "e2b", Isolation: box.IsolationVendorVM, Trust: box.TrustVendor},
		Cannot:  boxtest.Fake("a local fake of the service answers every process with the same output"),
	})
}
