package spawn_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/spawn"
	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
)

// TestStartClosesInherited: a child started with Start holds none of the
// descriptors this process has open without close-on-exec (a file and a
// directory), keeps the ones passed on purpose (stdin and ExtraFiles), and
// this process's descriptors keep their flags.
func TestStartClosesInherited(t *testing.T) {
	p := spawntest.Plant(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() { w.Write([]byte("passed on purpose")); w.Close() }()
	cmd := exec.Command("/bin/sh", "-c", "cat <&3; exec 3<&-; "+p.Probe())
	cmd.ExtraFiles = []*os.File{r}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := spawn.Run(cmd); err != nil {
		t.Fatal(err, out.String())
	}
	p.Check(t, "spawn.Run", out.String())
	if !strings.Contains(out.String(), "passed on purpose") {
		t.Errorf("ExtraFiles[0] did not reach the child as descriptor 3:\n%s", out.String())
	}
	if len(cmd.ExtraFiles) != 1 {
		t.Errorf("Start left %d ExtraFiles, want the caller's 1", len(cmd.ExtraFiles))
	}
	for _, fd := range []int{p.File, p.Dir} {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || fl&unix.FD_CLOEXEC != 0 {
			t.Errorf("descriptor %d of this process: flags %v, %v; want it open without close-on-exec", fd, fl, err)
		}
	}
}

// TestPlainStartLeaks is the control: os/exec alone passes the planted
// descriptors on (what Start is for), so the probe can see a leak.
func TestPlainStartLeaks(t *testing.T) {
	p := spawntest.Plant(t)
	out, _ := exec.Command("/bin/sh", "-c", p.Probe()).CombinedOutput()
	if !strings.Contains(string(out), p.Canary) {
		t.Fatalf("the probe did not see a descriptor os/exec passed on:\n%s", out)
	}
	os.RemoveAll(filepath.Join(p.DirPath, "leaked"))
}

// TestCloseOnExecAll: after it, a child started by plain os/exec holds
// none of the planted descriptors either.
func TestCloseOnExecAll(t *testing.T) {
	p := spawntest.Plant(t)
	spawn.CloseOnExecAll()
	out, err := exec.Command("/bin/sh", "-c", p.Probe()).CombinedOutput()
	if err != nil {
		t.Fatal(err, string(out))
	}
	p.Check(t, "after CloseOnExecAll", string(out))
}

// TestOutput: Output and CombinedOutput return what the child wrote.
func TestOutput(t *testing.T) {
	out, err := spawn.Output(exec.Command("/bin/sh", "-c", "echo out; echo err >&2"))
	if err != nil || string(out) != "out\n" {
		t.Fatalf("Output: %q, %v", out, err)
	}
	out, err = spawn.CombinedOutput(exec.Command("/bin/sh", "-c", "echo out; echo err >&2"))
	if err != nil || string(out) != "out\nerr\n" {
		t.Fatalf("CombinedOutput: %q, %v", out, err)
	}
	c := exec.Command("true")
	c.Stdout = io.Discard
	if _, err := spawn.Output(c); err == nil {
		t.Fatal("Output with Stdout set: no error")
	}
}

// forbidden names the functions and methods that start a process; only
// package spawn may use them.
func forbidden(obj types.Object) bool {
	f, ok := obj.(*types.Func)
	if !ok || f.Pkg() == nil {
		return false
	}
	name := f.Name()
	switch f.Pkg().Path() {
	case "os/exec":
		recv := f.Signature().Recv()
		return recv != nil && strings.HasSuffix(recv.Type().String(), "os/exec.Cmd") &&
			(name == "Start" || name == "Run" || name == "Output" || name == "CombinedOutput")
	case "os":
		return name == "StartProcess"
	case "syscall", "golang.org/x/sys/unix":
		return name == "ForkExec" || name == "StartProcess" || name == "Exec"
	}
	return false
}

// violations type-checks files (of package path) and lists each use of a
// forbidden function as "file:line: name".
func violations(fset *token.FileSet, path string, files []*ast.File, imp types.Importer) ([]string, error) {
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	var firstErr error
	conf := types.Config{Importer: imp, FakeImportC: true, Error: func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}}
	conf.Check(path, fset, files, info)
	var out []string
	for id, obj := range info.Uses {
		if forbidden(obj) {
			pos := fset.Position(id.Pos())
			out = append(out, fmt.Sprintf("%s:%d: %s", pos.Filename, pos.Line, obj.(*types.Func).FullName()))
		}
	}
	return out, firstErr
}

// TestEveryChildStartsThroughSpawn: no code of this module (tests aside)
// starts a process but through this package, so none can forget to close
// what it did not mean to pass on.
func TestEveryChildStartsThroughSpawn(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the module (-short)")
	}
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to list the module's packages")
		}
	}
	cmd := exec.Command(gobin, "list", "-e", "-export", "-compiled", "-deps", "-json=ImportPath,Dir,Export,CompiledGoFiles,Module", "github.com/gloveboxhq/glovebox/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type pkg struct {
		ImportPath, Dir, Export string
		CompiledGoFiles         []string
		Module                  *struct{ Path string }
	}
	exports := map[string]string{}
	var ours []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if p.Module != nil && p.Module.Path == "github.com/gloveboxhq/glovebox" {
			ours = append(ours, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if e := exports[path]; e != "" {
			return os.Open(e)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	checked := 0
	for _, p := range ours {
		if p.ImportPath == "github.com/gloveboxhq/glovebox/internal/spawn" {
			continue
		}
		var files []*ast.File
		for _, f := range p.CompiledGoFiles {
			if !filepath.IsAbs(f) {
				f = filepath.Join(p.Dir, f)
			}
			af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, af)
		}
		vs, err := violations(fset, p.ImportPath, files, imp)
		if err != nil {
			t.Errorf("type-checking %s: %v", p.ImportPath, err)
		}
		for _, v := range vs {
			t.Errorf("%s starts a process without internal/spawn (use spawn.Start, Run, Output or CombinedOutput)", v)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("checked %d packages of the module; the listing went wrong", checked)
	}
}

// TestViolationsSeen: the check above does flag a process start.
func TestViolationsSeen(t *testing.T) {
	const src = `package p
import ("os"; "os/exec"; "syscall")
func f() {
	exec.Command("x").Run()
	c := exec.Command("y")
	start := c.Start
	start()
	os.StartProcess("z", nil, nil)
	syscall.ForkExec("w", nil, nil)
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := violations(fset, "p", []*ast.File{f}, importer.ForCompiler(fset, "source", nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 4 {
		t.Fatalf("flagged %d uses, want 4: %v", len(vs), vs)
	}
}
