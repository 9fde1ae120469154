// Command conformance runs ruby/spec (mspec, in one Ruby process per
// shard) inside glovebox and on a baseline — the same Ruby image under
// wasmtime's own WASI, without glovebox's prelude, wrappers or quotas —
// prints a table per spec directory, and fails when glovebox fails an
// example the baseline passes, unless the accepted-differences file lists
// it with a reason. `make rubyspec` runs it.
//
// The suite is a directory holding ruby/spec as spec/ and mspec as mspec/:
// -suite, else $GLOVEBOX_RUBYSPEC, else ../shared/rubyspec. Without one it
// says how to get them and exits 0.
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

//go:embed bootstrap.rb
var bootstrap string

// EnvSuite names the environment variable that points at the suite.
const EnvSuite = "GLOVEBOX_RUBYSPEC"

type options struct {
	suite    string
	dirs     []string
	match    *regexp.Regexp
	jobs     int
	shard    int
	fileTime time.Duration
	accepted string
	sides    string
	report   string
	diffsOut string
	markdown bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var o options
	var dirs, match string
	fl.StringVar(&o.suite, "suite", "", "directory holding ruby/spec as spec/ and mspec as mspec/ (default $"+EnvSuite+", else ../shared/rubyspec)")
	fl.StringVar(&dirs, "dirs", "core,language,library", "comma-separated spec directories (or files) under spec/ to run")
	fl.StringVar(&match, "match", "", "run only spec files whose path (under spec/) matches this regular expression")
	fl.IntVar(&o.jobs, "jobs", 2, "shards run at once")
	fl.IntVar(&o.shard, "shard", 16, "spec files per shard (one Ruby process each side)")
	fl.DurationVar(&o.fileTime, "file-timeout", 10*time.Second, "a run's deadline is 60s plus this per spec file in it; the file still running then is recorded as an error and the files after it run again")
	fl.StringVar(&o.accepted, "accepted", "conformance/accepted-differences.txt", "accepted-differences file (\"SPEC -- REASON\" per line)")
	fl.StringVar(&o.sides, "sides", "both", "both, glovebox or baseline (one side: no comparison)")
	fl.StringVar(&o.report, "json", "", "write every record of both sides to this JSON file")
	fl.StringVar(&o.diffsOut, "diffs", "", "write the differences (markdown) to this file")
	fl.BoolVar(&o.markdown, "markdown", false, "print the table as markdown (for the README), with a summary by top directory first")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	o.dirs = strings.Split(dirs, ",")
	if match != "" {
		re, err := regexp.Compile(match)
		if err != nil {
			fmt.Fprintln(stderr, "conformance: -match:", err)
			return 2
		}
		o.match = re
	}
	if o.jobs < 1 || o.shard < 1 || o.fileTime <= 0 {
		fmt.Fprintln(stderr, "conformance: -jobs, -shard and -file-timeout must be positive")
		return 2
	}
	suite, ok, err := findSuite(o.suite)
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 2
	}
	if !ok {
		fmt.Fprintf(stdout, "rubyspec: skipped: no suite found (-suite, $%s, ../shared/rubyspec).\n"+
			"Get it with:\n"+
			"  git clone https://github.com/ruby/spec.git  DIR/spec\n"+
			"  git clone https://github.com/ruby/mspec.git DIR/mspec\n"+
			"then run: %s=DIR make rubyspec\n", EnvSuite, EnvSuite)
		return 0
	}
	o.suite = suite
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code, err := conform(ctx, o, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 1
	}
	return code
}

// findSuite returns the suite directory: the flag's, else $GLOVEBOX_RUBYSPEC,
// else ../shared/rubyspec. A directory named by the flag or the variable
// that does not hold spec/default.mspec and mspec/lib/mspec.rb is an
// error; a missing default is not (found false).
func findSuite(flagVal string) (dir string, found bool, err error) {
	for _, c := range []struct{ dir, from string }{{flagVal, "-suite"}, {os.Getenv(EnvSuite), "$" + EnvSuite}} {
		if c.dir == "" {
			continue
		}
		if !isSuite(c.dir) {
			return "", false, fmt.Errorf("%s %s: want ruby/spec in spec/ (spec/default.mspec) and mspec in mspec/ (mspec/lib/mspec.rb)", c.from, c.dir)
		}
		abs, err := filepath.Abs(c.dir)
		return abs, err == nil, err
	}
	if !isSuite("../shared/rubyspec") {
		return "", false, nil
	}
	abs, err := filepath.Abs("../shared/rubyspec")
	return abs, err == nil, err
}

func isSuite(dir string) bool {
	for _, f := range []string{"spec/default.mspec", "mspec/lib/mspec.rb"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// specFiles lists the *_spec.rb files under the given directories of
// spec/, relative to it, sorted.
func specFiles(o options) ([]string, error) {
	root := filepath.Join(o.suite, "spec")
	var files []string
	for _, d := range o.dirs {
		d = strings.Trim(strings.TrimSpace(d), "/")
		if d == "" {
			continue
		}
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() || !strings.HasSuffix(p, "_spec.rb") {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if o.match == nil || o.match.MatchString(rel) {
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	return slicesCompact(files), nil
}

func slicesCompact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// bootstrapCode is the program both sides run for files (paths under
// spec/): bootstrap.rb with the guest paths filled in as single-quoted
// Ruby strings, exact for any byte.
func bootstrapCode(files []string) string {
	var b strings.Builder
	b.WriteString("[")
	for i, f := range files {
		if i > 0 {
			b.WriteString(", ")
		}
		g := guestSpec + "/" + f
		g = strings.ReplaceAll(g, `\`, `\\`)
		g = strings.ReplaceAll(g, `'`, `\'`)
		b.WriteString("'" + g + "'")
	}
	b.WriteString("]")
	return strings.Replace(bootstrap, "GB_FILES", b.String(), 1)
}

// runBase is the part of a run's deadline that does not depend on how many
// files it runs (booting Ruby and mspec takes well under a second).
var runBase = 60 * time.Second

// runShard runs files on one side until each has ended or been recorded
// as aborted: a run that stops early (deadline, memory, trap) leaves a
// record on the file it was in, and the files after it run again in a
// fresh process.
func runShard(ctx context.Context, s side, files []string, fileTime time.Duration) ([]Record, error) {
	var recs []Record
	rest := files
	for len(rest) > 0 {
		timeout := runBase + fileTime*time.Duration(len(rest))
		out, abnormal, err := s.run(ctx, bootstrapCode(rest), timeout)
		if err != nil {
			return recs, fmt.Errorf("%s: %w", s.name(), err)
		}
		if ctx.Err() != nil {
			return recs, ctx.Err()
		}
		p := parseOutput(out, guestSpec+"/")
		recs = append(recs, p.Records...)
		n := len(p.Ended)
		if p.Done && n >= len(rest) {
			break
		}
		if n >= len(rest) {
			n = len(rest) - 1
		}
		if abnormal == "" {
			abnormal = "the run ended before the file did"
		}
		recs = append(recs, Record{File: rest[n], Desc: "(the file did not finish)", Outcome: Aborted, Message: abnormal})
		rest = rest[n+1:]
	}
	return recs, nil
}

func conform(ctx context.Context, o options, stdout, stderr io.Writer) (int, error) {
	acc, err := loadAccepted(o.accepted)
	if err != nil {
		return 0, err
	}
	files, err := specFiles(o)
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, errors.New("no spec files selected")
	}
	progress := func(s string) { fmt.Fprintln(stderr, "conformance:", s) }
	var sides []side
	if o.sides == "both" || o.sides == "glovebox" {
		g, err := newGloveboxSide(ctx, o.suite, o.jobs, progress)
		if err != nil {
			return 0, err
		}
		defer g.close()
		sides = append(sides, g)
	}
	if o.sides == "both" || o.sides == "baseline" {
		b, err := newBaselineSide(ctx, o.suite, progress)
		if err != nil {
			return 0, err
		}
		defer b.close()
		sides = append(sides, b)
	}
	if len(sides) == 0 {
		return 0, fmt.Errorf("-sides %q: want both, glovebox or baseline", o.sides)
	}

	// Shards: consecutive files, so a directory's files share processes.
	var shards [][]string
	for i := 0; i < len(files); i += o.shard {
		shards = append(shards, files[i:min(i+o.shard, len(files))])
	}
	type task struct {
		side  int
		shard int
	}
	tasks := make(chan task)
	results := make([][][]Record, len(sides))
	for i := range results {
		results[i] = make([][]Record, len(shards))
	}
	var (
		wg       sync.WaitGroup
		done     atomic.Int64
		firstErr error
		errOnce  sync.Once
	)
	start := time.Now()
	total := len(shards) * len(sides)
	for w := 0; w < o.jobs; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range tasks {
				recs, err := runShard(ctx, sides[t.side], shards[t.shard], o.fileTime)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
				}
				results[t.side][t.shard] = recs
				n := done.Add(1)
				fmt.Fprintf(stderr, "conformance: %d/%d shards (%s, %s…) %s\n", n, total, sides[t.side].name(),
					shards[t.shard][0], time.Since(start).Round(time.Second))
			}
		}()
	}
feed:
	for sh := range shards {
		for si := range sides {
			select {
			case tasks <- task{si, sh}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(tasks)
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	elapsed := time.Since(start)

	res := make([]*SideResult, len(sides))
	for i, s := range sides {
		r := &SideResult{Name: s.name()}
		for _, recs := range results[i] {
			r.Records = append(r.Records, recs...)
		}
		numberDuplicates(r.Records)
		res[i] = r
	}
	var diffs []Diff
	if len(res) == 2 {
		diffs = compare(res[0], res[1], acc)
	}
	printTable(stdout, files, res, diffs, o.markdown)
	fmt.Fprintf(stdout, "\n%d spec files, %d shards of up to %d files, %d at once, %s wall time\n",
		len(files), len(shards), o.shard, o.jobs, elapsed.Round(time.Second))
	if o.report != "" {
		if err := writeJSON(o.report, res, diffs); err != nil {
			return 0, err
		}
	}
	if o.diffsOut != "" {
		if err := os.WriteFile(o.diffsOut, []byte(diffsMarkdown(diffs)), 0o644); err != nil {
			return 0, err
		}
	}
	if len(res) < 2 {
		return 0, nil
	}
	var open []Diff
	accepted := 0
	for _, d := range diffs {
		if d.Reason == "" {
			open = append(open, d)
		} else {
			accepted++
		}
	}
	fmt.Fprintf(stdout, "%d examples the baseline passes and glovebox does not: %d accepted (%s), %d not\n",
		len(diffs), accepted, o.accepted, len(open))
	if o.match == nil && len(o.dirs) == 3 {
		for _, u := range acc.unused() {
			fmt.Fprintf(stdout, "note: accepted difference no longer seen: %s\n", u)
		}
	}
	if len(open) > 0 {
		fmt.Fprintln(stdout, "\nNot accepted (file: description — what glovebox reported):")
		for _, d := range open {
			fmt.Fprintf(stdout, "  %s — %s\n", d.Key(), d.what())
		}
		return 1, nil
	}
	return 0, nil
}

func (d Diff) what() string {
	switch d.Outcome {
	case Fail:
		return "failed: " + d.Message
	case Error:
		return "error: " + d.Message
	case 0:
		return "not run in glovebox: " + d.FileNote
	}
	return string(d.Outcome) + " " + d.Message
}

// printTable prints one row per directory (see group) and a total: files,
// then examples, failures and errors per side, then the differences not
// accepted and accepted. With markdown, a summary by top directory (core,
// language, library) comes first.
func printTable(w io.Writer, files []string, res []*SideResult, diffs []Diff, markdown bool) {
	type row struct {
		files     int
		ts        []Tally
		open, acc int
	}
	rows := map[string]*row{}
	tops := map[string]*row{}
	get := func(m map[string]*row, k string) *row {
		r := m[k]
		if r == nil {
			r = &row{ts: make([]Tally, len(res))}
			m[k] = r
		}
		return r
	}
	top := func(g string) string { t, _, _ := strings.Cut(g, "/"); return t }
	for _, f := range files {
		get(rows, group(f)).files++
		get(tops, top(group(f))).files++
	}
	for i, r := range res {
		for _, rec := range r.Records {
			g := group(rec.File)
			if rows[g] == nil {
				continue
			}
			rows[g].ts[i].add(rec)
			tops[top(g)].ts[i].add(rec)
		}
	}
	for _, d := range diffs {
		g := group(d.File)
		if d.Reason == "" {
			get(rows, g).open++
			get(tops, top(g)).open++
		} else {
			get(rows, g).acc++
			get(tops, top(g)).acc++
		}
	}
	total := &row{ts: make([]Tally, len(res))}
	for _, r := range tops {
		total.files += r.files
		total.open += r.open
		total.acc += r.acc
		for i, t := range r.ts {
			total.ts[i].Examples += t.Examples
			total.ts[i].Failures += t.Failures
			total.ts[i].Errors += t.Errors
		}
	}
	cols := []string{"directory", "files"}
	for _, r := range res {
		cols = append(cols, r.Name+" examples", "failures", "errors")
	}
	if len(res) == 2 {
		cols = append(cols, "differences", "accepted")
	}
	cells := func(name string, r *row) []string {
		c := []string{name, fmt.Sprint(r.files)}
		for _, t := range r.ts {
			c = append(c, fmt.Sprint(t.Examples), fmt.Sprint(t.Failures), fmt.Sprint(t.Errors))
		}
		if len(res) == 2 {
			c = append(c, fmt.Sprint(r.open), fmt.Sprint(r.acc))
		}
		return c
	}
	sorted := func(m map[string]*row) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	if markdown {
		table := func(keys []string, m map[string]*row) {
			fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
			for _, k := range keys {
				fmt.Fprintf(w, "| %s |\n", strings.Join(cells(k, m[k]), " | "))
			}
			c := cells("total", total)
			c[0] = "**total**"
			fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
		}
		table(sorted(tops), tops)
		fmt.Fprintln(w)
		table(sorted(rows), rows)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	for _, k := range sorted(rows) {
		fmt.Fprintln(tw, strings.Join(cells(k, rows[k]), "\t")+"\t")
	}
	fmt.Fprintln(tw, strings.Join(cells("total", total), "\t")+"\t")
	tw.Flush()
}

func writeJSON(path string, res []*SideResult, diffs []Diff) error {
	type rec struct {
		File    string `json:"file"`
		Desc    string `json:"desc"`
		Outcome string `json:"outcome"`
		Message string `json:"message,omitempty"`
	}
	out := map[string]any{}
	for _, r := range res {
		var rs []rec
		for _, x := range r.Records {
			rs = append(rs, rec{x.File, x.Desc, string(x.Outcome), x.Message})
		}
		out[r.Name] = rs
	}
	var ds []map[string]string
	for _, d := range diffs {
		ds = append(ds, map[string]string{"file": d.File, "desc": d.Desc, "glovebox": d.what(), "accepted": d.Reason})
	}
	out["differences"] = ds
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// diffsMarkdown lists the differences by file, accepted ones marked.
func diffsMarkdown(diffs []Diff) string {
	var b strings.Builder
	file := ""
	for _, d := range diffs {
		if d.File != file {
			file = d.File
			fmt.Fprintf(&b, "\n### %s\n", file)
		}
		acc := ""
		if d.Reason != "" {
			acc = " (accepted: " + d.Reason + ")"
		}
		fmt.Fprintf(&b, "- %s — %s%s\n", d.Desc, d.what(), acc)
	}
	return b.String()
}
