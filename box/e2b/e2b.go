// Package e2b runs commands in E2B's hosted sandboxes (vendor microVMs in
// E2B's cloud: trust "vendor", off-host by construction).
//
// The client follows E2B's public API as documented: POST /sandboxes
// (X-API-Key) creates a sandbox from a template; the sandbox's envd
// service takes files (POST /files, multipart) and starts a process
// (process.Process/Start, a Connect server stream of JSON envelopes whose
// events are start, data with base64 stdout/stderr, and end with the exit
// code); DELETE /sandboxes/{id} kills it. It is tested against a local
// fake server that follows those shapes. Nothing here has been verified
// against the live service.
package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"time"

	"github.com/gloveboxhq/glovebox/box"
)

// Config is an E2B box's set-up.
type Config struct {
	// APIURL is the control API; required (E2B's is https://api.e2b.dev).
	APIURL string
	// APIKey returns the key when a run starts; it is sent only in the
	// X-API-Key header and never appears in a result or error.
	APIKey func(context.Context) (string, error)
	// Template is the sandbox template; empty means "base".
	Template string
	// EnvdURL gives a sandbox's envd base URL; nil means
	// https://49983-<sandboxID>.e2b.app.
	EnvdURL func(sandboxID string) string
	// HTTP is the client; nil means one with no overall timeout (the
	// Command's timeout applies through the context).
	HTTP *http.Client
}

// Box is an E2B box; make it with [New].
type Box struct{ cfg Config }

var _ box.Box = (*Box)(nil)

// New checks cfg.
func New(cfg Config) (*Box, error) {
	if cfg.APIURL == "" || cfg.APIKey == nil {
		return nil, fmt.Errorf("%w: e2b needs APIURL and APIKey", box.ErrInvalidCommand)
	}
	if cfg.Template == "" {
		cfg.Template = "base"
	}
	if cfg.EnvdURL == nil {
		cfg.EnvdURL = func(id string) string { return "https://49983-" + id + ".e2b.app" }
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	return &Box{cfg: cfg}, nil
}

// Posture is (vendor_vm, vendor).
func (b *Box) Posture() box.Posture {
	return box.Posture{Backend: "e2b", Isolation: box.IsolationVendorVM, Trust: box.TrustVendor}
}

const home = "/home/user"

// Run creates a sandbox, uploads the files, runs c with streamed output,
// and kills the sandbox.
func (b *Box) Run(ctx context.Context, c box.Command) (*box.Result, error) {
	start := time.Now()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Stdin != nil || c.Tools != nil || len(c.Network.Allow) > 0 || len(c.Mounts) > 0 {
		return nil, fmt.Errorf("%w: the e2b box has no stdin, tool socket, egress allowlist or host mounts yet", box.ErrUnsupported)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = box.DefaultTimeout
	}
	key, err := b.cfg.APIKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("box: the e2b API key could not be resolved")
	}
	body, _ := json.Marshal(map[string]any{"templateID": b.cfg.Template, "timeout": int(timeout.Seconds()) + 30})
	var created struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := b.do(ctx, key, "POST", b.cfg.APIURL+"/sandboxes", "application/json", body, &created); err != nil {
		return nil, err
	}
	if created.SandboxID == "" {
		return nil, fmt.Errorf("box: e2b: no sandboxID in the create response")
	}
	defer b.do(context.WithoutCancel(ctx), key, "DELETE", b.cfg.APIURL+"/sandboxes/"+url.PathEscape(created.SandboxID), "", nil, nil)
	envd := b.cfg.EnvdURL(created.SandboxID)
	for name, data := range c.Files {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("file", name)
		fw.Write(data)
		mw.Close()
		u := envd + "/files?" + url.Values{"path": {home + "/" + name}, "username": {"user"}}.Encode()
		if err := b.do(ctx, key, "POST", u, mw.FormDataContentType(), buf.Bytes(), nil); err != nil {
			return nil, err
		}
	}
	envs := map[string]string{}
	for k, v := range c.Env {
		envs[k] = v
	}
	for k, f := range c.Credentials {
		v, err := f(ctx)
		if err != nil {
			return nil, fmt.Errorf("box: credential %s could not be resolved", k)
		}
		envs[k] = v
	}
	argv := c.ArgvOrShell()
	req, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": argv[0], "args": argv[1:], "envs": envs, "cwd": home}})
	frame := make([]byte, 5, 5+len(req))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(req)))
	frame = append(frame, req...)

	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(rctx, "POST", envd+"/process.Process/Start", bytes.NewReader(frame))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/connect+json")
	hreq.Header.Set("X-API-Key", key)
	res := &box.Result{Posture: b.Posture()}
	l := c.Limits.WithDefaults()
	var stdout, stderr []byte
	keep := func(dst *[]byte, trunc *bool, p []byte, stream int) {
		room := l.Output - len(*dst)
		if len(p) > room {
			p, *trunc = p[:max(room, 0)], true
		}
		*dst = append(*dst, p...)
		if c.Stream != nil && len(p) > 0 {
			c.Stream(stream, p)
		}
	}
	resp, err := b.cfg.HTTP.Do(hreq)
	ended := false
	if err == nil {
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("box: e2b: process start: HTTP %d", resp.StatusCode)
		}
		r := bufio.NewReader(resp.Body)
		for !ended {
			var hdr [5]byte
			if _, err = io.ReadFull(r, hdr[:]); err != nil {
				break
			}
			n := binary.BigEndian.Uint32(hdr[1:])
			if n > 16<<20 {
				return nil, fmt.Errorf("box: e2b: a stream message of %d bytes", n)
			}
			msg := make([]byte, n)
			if _, err = io.ReadFull(r, msg); err != nil {
				break
			}
			if hdr[0]&2 != 0 { // end of stream
				break
			}
			var ev struct {
				Event struct {
					Data *struct{ Stdout, Stderr string } `json:"data"`
					End  *struct {
						ExitCode int    `json:"exitCode"`
						Status   string `json:"status"`
					} `json:"end"`
				} `json:"event"`
			}
			if json.Unmarshal(msg, &ev) != nil {
				continue
			}
			if d := ev.Event.Data; d != nil {
				if p, e := base64.StdEncoding.DecodeString(d.Stdout); e == nil {
					keep(&stdout, &res.StdoutTruncated, p, 1)
				}
				if p, e := base64.StdEncoding.DecodeString(d.Stderr); e == nil {
					keep(&stderr, &res.StderrTruncated, p, 2)
				}
			}
			if e := ev.Event.End; e != nil {
				res.ExitStatus, ended = e.ExitCode, true
			}
		}
	}
	switch {
	case ctx.Err() != nil:
		res.Canceled, res.ExitStatus = true, 137
	case rctx.Err() != nil:
		res.TimedOut, res.ExitStatus = true, 124
	case !ended:
		return nil, fmt.Errorf("box: e2b: the process stream ended without an exit status (the run is in doubt)")
	}
	res.Stdout, res.Stderr = string(stdout), string(stderr)
	res.Duration = time.Since(start)
	return res, nil
}

// do sends one API request; errors name the method and status only.
func (b *Box) do(ctx context.Context, key, method, u, ctype string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("box: e2b: bad URL")
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("X-API-Key", key)
	resp, err := b.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("box: e2b: %s request failed", method)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("box: e2b: %s: HTTP %d", method, resp.StatusCode)
	}
	if out != nil {
		return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
	}
	return nil
}
