package doccheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// What the harness did with a block (Report.Kind).
const (
	KindRun        = "run"        // a shell script block ran
	KindTranscript = "transcript" // a "$ " transcript ran and its output was compared
	KindServer     = "server"     // a background block started, served the guide, was stopped
	KindSession    = "session"    // a JSON-RPC transcript played against its command (stdio)
	KindFile       = "file"       // a data block was parsed and written for later blocks
	KindParsed     = "parsed"     // a yaml or json block parsed
	KindExcerpt    = "excerpt"    // a Go block is a verbatim excerpt of its compiled source
	KindCompiled   = "compiled"   // a Go block compiled as pasted
	KindSkipped    = "skipped"    // marked skip, with its reason
	KindText       = "text"       // output or a protocol transcript: not code
	KindRuby       = "ruby"       // Ruby: held by the gem's own tests (ruby/test/test_docs.rb)
)

// Report is what became of one block.
type Report struct {
	Block    Block
	Kind     string        // one of the Kind constants
	Commands int           // commands run (shell blocks)
	Skip     string        // the reason, for KindSkipped
	Err      error         // why the block failed; nil when it passed
	Took     time.Duration // time spent on it
}

// Runner runs the shell and data blocks of guides, each guide in a fresh
// directory of its own, its blocks in order, so a block may use what an
// earlier one made (files, a server) and nothing else.
type Runner struct {
	Root string // the checkout, absolute
	// Bin is a directory holding the glovebox built from Root; it comes
	// first on the blocks' PATH and is their GOBIN.
	Bin string
	// Work holds the guides' directories (Work/NAME, NAME the guide's file
	// name without .md), removed and made again for each run. Keep it the
	// same from run to run: Go's build cache is keyed by a package's
	// directory, so a build in a copy of the checkout at the same place
	// is served from the cache the next time.
	Work string
	// Checkout names the guides (file names, such as "README.md") whose
	// commands run at the root of a checkout (go install ./cmd/glovebox,
	// make): their directory is a copy of Root's files, made afresh.
	Checkout map[string]bool
	Timeout  time.Duration // a block's limit unless it sets one
	// Env is the blocks' environment before PATH, GOBIN and NO_COLOR are
	// set and glovebox's own variables other than where its image and
	// caches are (keepEnv) are dropped, as a reader's shell has none;
	// nil means os.Environ().
	Env []string
}

// keepEnv are the GLOVEBOX_ variables a block sees: where this machine
// keeps the image, the caches, npm and Node.
var keepEnv = map[string]bool{"GLOVEBOX_IMAGE": true, "GLOVEBOX_CACHE_DIR": true, "GLOVEBOX_NPM_DIR": true, "GLOVEBOX_NODE": true}

// Guide runs one guide's blocks (Go blocks excepted: see CheckGo) and
// reports on each, in order. Servers its background blocks started are
// stopped before it returns. The error is for what stops the guide as a
// whole (an unreadable file, a directory that cannot be made).
func (r *Runner) Guide(ctx context.Context, path string) ([]Report, error) {
	blocks, err := Read(path)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	base := filepath.Join(r.Work, strings.TrimSuffix(name, ".md"))
	if err := os.RemoveAll(base); err != nil {
		return nil, err
	}
	dir := base
	if r.Checkout[name] {
		dir = filepath.Join(base, "glovebox")
		if err := CopyCheckout(r.Root, dir); err != nil {
			return nil, fmt.Errorf("%s: copying the checkout: %w", name, err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ctl := filepath.Join(r.Work, "."+strings.TrimSuffix(name, ".md")+".ctl")
	if err := os.RemoveAll(ctl); err != nil {
		return nil, err
	}
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	var reports []Report
	for i, b := range blocks {
		start := time.Now()
		rep := Report{Block: b}
		d, err := ParseDirective(b.Run)
		switch {
		case err != nil:
			rep.Err = fmt.Errorf("%s: %w", r.where(b, 0), err)
		case b.Lang == "go":
			continue // CheckGo
		case d.Skip != "":
			rep.Kind, rep.Skip = KindSkipped, d.Skip
		case d.Stdio != "":
			rep.Kind = KindSession
			timeout := r.Timeout
			if d.Timeout > 0 {
				timeout = d.Timeout
			}
			rep.Err = r.session(ctx, b, d, dir, timeout)
		case b.Lang == "sh":
			rep.Kind = KindRun
			cmds, err := Commands(b.Lines)
			if err != nil {
				rep.Err = fmt.Errorf("%s: %w", r.where(b, 0), err)
				break
			}
			if IsTranscript(b.Lines) {
				rep.Kind = KindTranscript
			}
			rep.Commands = len(cmds)
			bctl := filepath.Join(ctl, strconv.Itoa(i))
			if d.Background {
				rep.Kind = KindServer
				s, err := r.serve(ctx, b, cmds, dir, bctl, d)
				if s != nil {
					servers = append(servers, s)
				}
				rep.Err = err
				break
			}
			timeout := r.Timeout
			if d.Timeout > 0 {
				timeout = d.Timeout
			}
			rep.Err = r.run(ctx, b, cmds, dir, bctl, timeout)
		case b.Lang == "yaml" || b.Lang == "json":
			rep.Kind = KindParsed
			rep.Err = parseData(b)
			if rep.Err == nil && d.File != "" {
				rep.Kind = KindFile
				p := filepath.Join(dir, d.File)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return nil, err
				}
				rep.Err = os.WriteFile(p, []byte(strings.Join(dedent(b.Lines), "\n")+"\n"), 0o644)
			}
		case d.File != "":
			rep.Kind = KindFile
			p := filepath.Join(dir, d.File)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, err
			}
			rep.Err = os.WriteFile(p, []byte(strings.Join(dedent(b.Lines), "\n")+"\n"), 0o644)
		case b.Lang == "text":
			rep.Kind = KindText
		case b.Lang == "ruby":
			rep.Kind = KindRuby
		default:
			got := "none"
			if b.Lang != "" {
				got = b.Lang
			}
			rep.Err = fmt.Errorf("%s: a block needs a language the harness knows after its fence: sh (run), go (compiled), yaml or json (parsed), ruby, text (output, transcripts: not code); it has %s", r.where(b, 0), got)
		}
		rep.Took = time.Since(start)
		reports = append(reports, rep)
	}
	return reports, nil
}

// where names a block's line: the guide relative to the checkout, and the
// line of the block's line-th line (0: the fence).
func (r *Runner) where(b Block, line int) string {
	f := b.File
	if rel, err := filepath.Rel(r.Root, f); err == nil && !strings.HasPrefix(rel, "..") {
		f = rel
	}
	if line == 0 {
		return fmt.Sprintf("%s:%d", f, b.Line)
	}
	return fmt.Sprintf("%s:%d", f, b.Line+line)
}

// dedent removes the indentation every non-blank line shares (a block
// inside a list item is indented with it).
func dedent(lines []string) []string {
	prefix := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if prefix < 0 || n < prefix {
			prefix = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= prefix && prefix > 0 {
			l = l[prefix:]
		}
		out[i] = l
	}
	return out
}

func parseData(b Block) error {
	text := strings.Join(dedent(b.Lines), "\n")
	if b.Lang == "json" {
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			return fmt.Errorf("%s:%d: not JSON: %v", b.File, b.Line, err)
		}
		return nil
	}
	var v any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		return fmt.Errorf("%s:%d: not YAML: %v", b.File, b.Line, err)
	}
	return nil
}

func (r *Runner) env() []string {
	env := r.Env
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+3)
	path := os.Getenv("PATH")
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		switch k {
		case "PATH":
			path = v
		case "GOBIN", "NO_COLOR":
		default:
			if strings.HasPrefix(k, "GLOVEBOX_") && !keepEnv[k] {
				continue
			}
			out = append(out, e)
		}
	}
	return append(out, "PATH="+r.Bin+string(os.PathListSeparator)+path, "GOBIN="+r.Bin, "NO_COLOR=1")
}

// script writes the block as a bash script that runs each command with
// its output in its own file and records its exit status; a status other
// than the one wanted ends the script there. The recording returns the
// command's status, so the next command's $? is the reader's.
func script(cmds []Command, ctl string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "__dc() { printf '%%s %%s\\n' \"$1\" \"$2\" >>%s; [ \"$3\" = any ] || [ \"$2\" = \"$3\" ] || exit 97; return \"$2\"; }\n", shellQuote(filepath.Join(ctl, "status")))
	for i, c := range cmds {
		want := strconv.Itoa(c.Exit)
		if c.Exit < 0 {
			want = "any"
		}
		fmt.Fprintf(&s, "{\n%s\n} >%s 2>&1\n__dc %d $? %s\n", c.Text, shellQuote(filepath.Join(ctl, strconv.Itoa(i)+".out")), i, want)
	}
	return s.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// start starts a block's script in its own process group, with no input.
func (r *Runner) start(cmds []Command, dir, ctl string) (*exec.Cmd, error) {
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(ctl, "script.sh")
	if err := os.WriteFile(path, []byte(script(cmds, ctl)), 0o644); err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(ctl, "shell.out"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command("bash", "--noprofile", "--norc", path)
	cmd.Dir, cmd.Env = dir, r.env()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, spawn.Start(cmd)
}

// run runs a foreground block and checks each command.
func (r *Runner) run(ctx context.Context, b Block, cmds []Command, dir, ctl string, timeout time.Duration) error {
	cmd, err := r.start(cmds, dir, ctl)
	if err != nil {
		return fmt.Errorf("%s: %w", r.where(b, 0), err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-done:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		timedOut = true
	}
	// Whatever the block left behind in its group goes now.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return r.check(b, cmds, ctl, timedOut, timeout)
}

// check compares what each command did with what the guide says.
func (r *Runner) check(b Block, cmds []Command, ctl string, timedOut bool, timeout time.Duration) error {
	status := map[int]int{}
	data, _ := os.ReadFile(filepath.Join(ctl, "status"))
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var i, rc int
		if _, err := fmt.Sscanf(l, "%d %d", &i, &rc); err == nil {
			status[i] = rc
		}
	}
	for i, c := range cmds {
		out, _ := os.ReadFile(filepath.Join(ctl, strconv.Itoa(i)+".out"))
		rc, ran := status[i]
		what := func(format string, args ...any) error {
			return fmt.Errorf("%s: %s\n\tcommand: %s\n\toutput:\n%s", r.where(b, c.Line+1), fmt.Sprintf(format, args...), indent(c.Text), indent(tail(string(out), 40)))
		}
		switch {
		case !ran && timedOut:
			return what("still running after the block's %v limit (a server needs `<!-- run: background port N -->`; a slow block `<!-- run: timeout 2m -->`)", timeout)
		case !ran:
			shell, _ := os.ReadFile(filepath.Join(ctl, "shell.out"))
			return what("never finished: the shell ended before it (%s)", strings.TrimSpace(string(shell)))
		case c.Exit >= 0 && rc != c.Exit:
			return what("exit %d, want %d (a command that should fail says \"# ... exit N\")", rc, c.Exit)
		case c.Value != "" && !strings.Contains(string(out), "=> "+c.Value):
			return what("the comment says => %s, the output does not", c.Value)
		case c.Output != nil || c.Exit < 0:
			if diff := MatchOutput(c.Output, string(out)); diff != "" {
				return what("%s", diff)
			}
		}
	}
	return nil
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "\t\t(nothing)"
	}
	return "\t\t" + strings.ReplaceAll(s, "\n", "\n\t\t")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// server is a background block's process.
type server struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *server) stop() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// serve starts a background block and waits until its port listens.
func (r *Runner) serve(ctx context.Context, b Block, cmds []Command, dir, ctl string, d Directive) (*server, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.Port))
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s: port %d is in use by another process: the server block cannot be tried here", r.where(b, 0), d.Port)
	}
	cmd, err := r.start(cmds, dir, ctl)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.where(b, 0), err)
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	timeout := r.Timeout
	if d.Timeout > 0 {
		timeout = d.Timeout
	}
	deadline := time.Now().Add(timeout)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			err := r.check(b, cmds, ctl, false, timeout)
			if err == nil {
				err = fmt.Errorf("%s: the server ended before it listened on port %d", r.where(b, 0), d.Port)
			}
			return s, err
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return s, r.check(b, cmds, ctl, true, timeout)
		}
	}
}

// CopyCheckout copies the checkout's files (those git tracks, and new
// ones it does not ignore; every file but .git without git) to dir, as a
// reader's fresh clone has them.
func CopyCheckout(root, dir string) error {
	var files []string
	out, err := spawn.Output(exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"))
	if err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
	} else {
		err = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && e.Name() == ".git" {
				return filepath.SkipDir
			}
			if e.Type().IsRegular() {
				rel, _ := filepath.Rel(root, p)
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, f := range files {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted, not yet committed
		}
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(t, dst); err != nil {
				return err
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src) // a checkout's files are small
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
