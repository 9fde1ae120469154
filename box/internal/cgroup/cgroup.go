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
	// locks hold each of dirs open with flock(LOCK_EX) until Remove: the
	// proof for Sweep, in any process, that the group's owner lives.
	locks []*os.File
}

// own makes dir (its parent must exist) and takes its lock: a group
// whose directory existed already (a name another process chose too) is
// not shared.
func (g *Group) own(dir string) bool {
	if os.Mkdir(dir, 0o755) != nil {
		return false
	}
	f, err := lockDir(dir)
	if err != nil {
		os.Remove(dir)
		return false
	}
	g.dirs = append(g.dirs, dir)
	g.locks = append(g.locks, f)
	return true
}

// lockDir opens the group directory dir (not through a symbolic link)
// and takes its flock without waiting. The error is the open's, or the
// flock's (EWOULDBLOCK: another process holds it).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
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
	g := &Group{v2: true, memDir: dir, path: filepath.Join("/", own, name)}
	if !g.own(dir) {
		return nil, ErrUnavailable
	}
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
		if os.MkdirAll(filepath.Dir(dir), 0o755) != nil || !g.own(dir) {
			return "", false
		}
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

// Remove kills what is left, deletes the group's directories, then lets
// their locks go (a directory rmdir could not remove is Sweep's then).
func (g *Group) Remove() {
	g.Kill()
	for _, d := range g.dirs {
		for i := 0; i < 50 && os.Remove(d) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, f := range g.locks {
		f.Close()
	}
	g.locks = nil
}

// Sweep removes the run groups left behind by processes that died: the
// directories named prefix+… directly under this process's own v2 group
// and under each v1 hierarchy's glovebox group, that were last changed
// over age ago. Ownership is proved by lock, not guessed: the process that
// made a group (New) holds a flock on each of its directories until
// Remove, and the kernel drops it when that process dies however it dies,
// whatever its temp dir, mount or PID namespace. So a name is swept only
// when Sweep can take the lock of every directory of that name (runsc adds
// directories of the same name in the other v1 hierarchies; those carry
// no lock but go with their name), holding them while it kills what is
// still inside (a sandbox's init that missed its owner's death: nothing
// else would ever end it) and removes them. runsc's own groups (made when
// New could not make one: "glovebox-"+prefix+… at a v1 hierarchy's top)
// have no lock to prove anything by: they are only rmdir'ed, which fails
// while one holds a process or a child group. What fails stays for the
// next sweep.
func Sweep(prefix string, age time.Duration) {
	now := time.Now()
	old := func(dir string) bool {
		fi, err := os.Lstat(dir)
		return err == nil && fi.IsDir() && now.Sub(fi.ModTime()) >= age
	}
	var parents []string
	if own := ownV2(); own != "" {
		parents = append(parents, filepath.Join(Root, own))
	}
	hs, _ := os.ReadDir(Root)
	for _, h := range hs {
		if !h.IsDir() {
			continue
		}
		parents = append(parents, filepath.Join(Root, h.Name(), "glovebox"))
		es, _ := os.ReadDir(filepath.Join(Root, h.Name()))
		for _, e := range es {
			dir := filepath.Join(Root, h.Name(), e.Name())
			if e.IsDir() && strings.HasPrefix(e.Name(), "glovebox-"+prefix) && old(dir) {
				os.Remove(dir)
			}
		}
	}
	byName := map[string][]string{}
	var names []string
	for _, parent := range parents {
		es, _ := os.ReadDir(parent)
		for _, e := range es {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				if byName[e.Name()] == nil {
					names = append(names, e.Name())
				}
				byName[e.Name()] = append(byName[e.Name()], filepath.Join(parent, e.Name()))
			}
		}
	}
	for _, name := range names {
		sweepGroup(byName[name], old)
	}
}

// sweepGroup removes the directories of one group name when all are old
// and none is locked by a live owner.
func sweepGroup(dirs []string, old func(string) bool) {
	var locks []*os.File
	defer func() {
		for _, f := range locks {
			f.Close()
		}
	}()
	for _, d := range dirs {
		if !old(d) {
			return
		}
		f, err := lockDir(d)
		if err != nil {
			return // its owner lives (or it is not ours to judge)
		}
		locks = append(locks, f)
	}
	for _, d := range dirs {
		killStrays(d)
		os.Remove(d)
	}
}
