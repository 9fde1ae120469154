// Package cgroup makes a per-run control group with memory, pids and CPU
// limits: cgroup v2 when this process's own cgroup delegates the
// controllers, else the v1 memory, pids and cpu hierarchies, else nothing
// (New says so and the caller falls back to rlimits).
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where the cgroup file systems are mounted.
const Root = "/sys/fs/cgroup"

// Limits for one group; zero means no limit.
type Limits struct {
	Memory int64   // bytes
	Pids   int     // tasks
	CPUs   float64 // cores
}

// Group is one run's control group.
type Group struct {
	dirs     []string // one per hierarchy (v1), or one (v2)
	v2       bool
	memDir   string
	path     string   // the group's path below each hierarchy's root
	Enforced []string // "memory:cgroup", "pids:cgroup", "cpu:cgroup"
}

// Path is the group's path below the hierarchy's root ("/glovebox/NAME"
// on v1, "/OWN/NAME" on v2), as an OCI spec's linux.cgroupsPath names it.
func (g *Group) Path() string { return g.path }

// ErrUnavailable: no hierarchy lets this process make a group.
var ErrUnavailable = errors.New("cgroup: cannot create a control group here")

// New makes a group named name with l. Limits a hierarchy cannot set are
// left out of Enforced.
func New(name string, l Limits) (*Group, error) {
	if g, err := newV2(name, l); err == nil {
		return g, nil
	}
	return newV1(name, l)
}

func write(dir, file, v string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644)
}

func newV2(name string, l Limits) (*Group, error) {
	ctl, err := os.ReadFile(filepath.Join(Root, "cgroup.controllers"))
	if err != nil {
		return nil, ErrUnavailable
	}
	own := ownV2()
	if own == "" {
		return nil, ErrUnavailable
	}
	parent := filepath.Join(Root, own)
	sub, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	have := strings.Fields(string(sub))
	if !contains(strings.Fields(string(ctl)), "memory") || !contains(have, "memory") || !contains(have, "pids") {
		return nil, ErrUnavailable
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, ErrUnavailable
	}
	g := &Group{dirs: []string{dir}, v2: true, memDir: dir, path: filepath.Join("/", own, name)}
	if l.Memory > 0 && write(dir, "memory.max", strconv.FormatInt(l.Memory, 10)) == nil {
		write(dir, "memory.swap.max", "0")
		g.Enforced = append(g.Enforced, "memory:cgroup")
	}
	if l.Pids > 0 && write(dir, "pids.max", strconv.Itoa(l.Pids)) == nil {
		g.Enforced = append(g.Enforced, "pids:cgroup")
	}
	if l.CPUs > 0 && write(dir, "cpu.max", fmt.Sprintf("%d 100000", int(l.CPUs*100000))) == nil {
		g.Enforced = append(g.Enforced, "cpu:cgroup")
	}
	return g, nil
}

func ownV2() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

func newV1(name string, l Limits) (*Group, error) {
	g := &Group{path: "/glovebox/" + name}
	mk := func(ctrl string) (string, bool) {
		dir := filepath.Join(Root, ctrl, "glovebox", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", false
		}
		g.dirs = append(g.dirs, dir)
		return dir, true
	}
	if l.Memory > 0 {
		if dir, ok := mk("memory"); ok && write(dir, "memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)) == nil {
			write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10))
			g.memDir = dir
			g.Enforced = append(g.Enforced, "memory:cgroup")
		}
	}
	if l.Pids > 0 {
		if dir, ok := mk("pids"); ok && write(dir, "pids.max", strconv.Itoa(l.Pids)) == nil {
			g.Enforced = append(g.Enforced, "pids:cgroup")
		}
	}
	if l.CPUs > 0 {
		if dir, ok := mk("cpu"); ok && write(dir, "cpu.cfs_period_us", "100000") == nil &&
			write(dir, "cpu.cfs_quota_us", strconv.Itoa(int(l.CPUs*100000))) == nil {
			g.Enforced = append(g.Enforced, "cpu:cgroup")
		}
	}
	if len(g.dirs) == 0 {
		return nil, ErrUnavailable
	}
	return g, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// ProcsFiles are the cgroup.procs files a process writes its pid into to
// join the group (in every hierarchy).
func (g *Group) ProcsFiles() []string {
	var fs []string
	for _, d := range g.dirs {
		fs = append(fs, filepath.Join(d, "cgroup.procs"))
	}
	return fs
}

// Kill sends SIGKILL to every process in the group until it is empty
// (at most about a second: a fork racing the kill is caught on the next
// pass, and the pids limit bounds how many there are).
func (g *Group) Kill() {
	if g.v2 && write(g.dirs[0], "cgroup.kill", "1") == nil {
		return
	}
	for i := 0; i < 100; i++ {
		any := false
		for _, d := range g.dirs {
			for _, pid := range pids(d) {
				syscall.Kill(pid, syscall.SIGKILL)
				any = true
			}
		}
		if !any {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killStrays SIGKILLs the processes in the group dir (through cgroup.kill
// where the kernel has it) and waits up to 100 ms for them to leave it.
func killStrays(dir string) {
	if len(pids(dir)) == 0 {
		return
	}
	if write(dir, "cgroup.kill", "1") != nil {
		for _, pid := range pids(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for i := 0; i < 100 && len(pids(dir)) > 0; i++ {
		time.Sleep(time.Millisecond)
	}
}

func pids(dir string) []int {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// OOMKilled reports whether the memory limit killed a process of the group.
func (g *Group) OOMKilled() bool {
	if g.memDir == "" {
		return false
	}
	file := "memory.oom_control"
	if g.v2 {
		file = "memory.events"
	}
	b, _ := os.ReadFile(filepath.Join(g.memDir, file))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n > 0
		}
	}
	return false
}

// Remove kills what is left and deletes the group's directories.
func (g *Group) Remove() {
	g.Kill()
	for _, d := range g.dirs {
		for i := 0; i < 50 && os.Remove(d) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Sweep removes (rmdir) the run groups left behind: directories named
// prefix+… directly under this process's own v2 group, under each v1
// hierarchy's glovebox group, and (runsc's own groups, "glovebox-"+name)
// at each v1 hierarchy's top, that were last changed over age ago and
// whose name orphan approves (its run directory is gone). Processes still
// in such a group are killed first: they outlived the process that ran
// them (a sandbox's init that missed its parent's death, say), and
// nothing else would ever end them. rmdir fails while a group holds a
// process that has not exited yet or a child group: those stay for the
// next sweep.
func Sweep(prefix string, age time.Duration, orphan func(name string) bool) {
	var parents []string
	if own := ownV2(); own != "" {
		parents = append(parents, filepath.Join(Root, own))
	}
	hs, _ := os.ReadDir(Root)
	for _, h := range hs {
		if h.IsDir() {
			parents = append(parents, filepath.Join(Root, h.Name()), filepath.Join(Root, h.Name(), "glovebox"))
		}
	}
	now := time.Now()
	for _, parent := range parents {
		es, _ := os.ReadDir(parent)
		for _, e := range es {
			name := e.Name()
			if strings.HasPrefix(name, "glovebox-"+prefix) {
				name = strings.TrimPrefix(name, "glovebox-")
			}
			if !e.IsDir() || !strings.HasPrefix(name, prefix) {
				continue
			}
			fi, err := e.Info()
			if err != nil || now.Sub(fi.ModTime()) < age || !orphan(name) {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			killStrays(dir)
			os.Remove(dir)
		}
	}
}
