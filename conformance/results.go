package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Outcome of one example, or of one exception outside any example.
type Outcome byte

const (
	Pass    Outcome = 'P'
	Fail    Outcome = 'F' // an expectation not met
	Error   Outcome = 'E' // an exception in an example
	Outside Outcome = 'X' // an exception outside any example (load error, before :all)
	Aborted Outcome = 'A' // the runner's own record: the file timed out or its VM ended
)

// Record is one reported example. Key identifies it exactly: the spec
// file (relative to the suite's spec directory), its full description,
// and, when a file has several examples with one description, their
// order ("#2", "#3").
type Record struct {
	File    string  `json:"file"`
	Desc    string  `json:"desc"`
	Outcome Outcome `json:"-"`
	Message string  `json:"message,omitempty"`
}

// Key names an example exactly: "FILE: FULL DESCRIPTION" (a repeated
// description already carries its number in Desc).
func (r Record) Key() string { return r.File + ": " + r.Desc }

// Parsed is what one eval reported.
type Parsed struct {
	Records []Record
	Done    bool     // the D record: mspec finished every file
	Ended   []string // files whose loading ended (U records), in order
	Current string   // the file being loaded when the output stops, if any
}

var marker = []byte("\x1eGB ")

// parseOutput reads the record lines of a bootstrap run's standard output;
// everything else the specs printed is ignored. Files in records are
// absolute guest paths; specRoot is stripped from them.
func parseOutput(out []byte, specRoot string) Parsed {
	var p Parsed
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	file := ""
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, marker) {
			continue
		}
		fields := strings.Split(string(line[len(marker):]), " ")
		if len(fields) == 0 || len(fields[0]) != 1 {
			continue
		}
		var vals []string
		ok := true
		for _, f := range fields[1:] {
			b, err := base64.StdEncoding.DecodeString(f)
			if err != nil {
				ok = false
				break
			}
			vals = append(vals, string(b))
		}
		if !ok {
			continue
		}
		arg := func(i int) string {
			if i < len(vals) {
				return vals[i]
			}
			return ""
		}
		switch k := fields[0][0]; k {
		case 'L':
			file = strings.TrimPrefix(arg(0), specRoot)
			p.Current = file
		case 'U':
			p.Ended = append(p.Ended, strings.TrimPrefix(arg(0), specRoot))
			p.Current = ""
		case 'P', 'F', 'E', 'X':
			p.Records = append(p.Records, Record{File: file, Desc: arg(0), Outcome: Outcome(k), Message: arg(1)})
		case 'D':
			p.Done = true
		}
	}
	return p
}

// numberDuplicates gives the second and later examples of a file that
// share a description a "#n" suffix, so every key is unique. Both sides
// run the same files in the same order, so the numbering matches.
func numberDuplicates(rs []Record) {
	seen := map[string]int{}
	for i := range rs {
		k := rs[i].Key()
		seen[k]++
		if n := seen[k]; n > 1 {
			rs[i].Desc = fmt.Sprintf("%s #%d", rs[i].Desc, n)
		}
	}
}

// Accepted is the accepted-differences list: entries that name a spec
// file, a directory (ending in "/"), or one example ("file: description"),
// each with the reason glovebox deliberately differs there.
type Accepted struct {
	entries []acceptedEntry
}

type acceptedEntry struct {
	spec   string // file, directory/ or file: description
	reason string
	line   int
	used   bool
}

// loadAccepted reads the file: one entry a line, "SPEC -- REASON"; blank
// lines and lines starting with "#" are ignored. A missing reason is an
// error: every accepted difference says why.
func loadAccepted(path string) (*Accepted, error) {
	a := &Accepted{}
	if path == "" {
		return a, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		j := strings.LastIndex(line, " -- ")
		if j < 0 || strings.TrimSpace(line[j+4:]) == "" {
			return nil, fmt.Errorf("%s:%d: want \"SPEC -- REASON\", got %q", path, i+1, line)
		}
		a.entries = append(a.entries, acceptedEntry{spec: strings.TrimSpace(line[:j]), reason: strings.TrimSpace(line[j+4:]), line: i + 1})
	}
	return a, nil
}

// match returns the reason a difference in r is accepted, or "".
func (a *Accepted) match(r Record) string {
	for i := range a.entries {
		e := &a.entries[i]
		switch {
		case e.spec == r.Key(),
			e.spec == r.File,
			strings.HasSuffix(e.spec, "/") && strings.HasPrefix(r.File, e.spec):
			e.used = true
			return e.reason
		}
		// An entry names an example without its "#n" numbering too.
		if d, ok := strings.CutPrefix(r.Key(), e.spec+" #"); ok && isDigits(d) {
			e.used = true
			return e.reason
		}
	}
	return ""
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// unused lists entries that matched no difference in this run.
func (a *Accepted) unused() []string {
	var out []string
	for _, e := range a.entries {
		if !e.used {
			out = append(out, fmt.Sprintf("line %d: %s", e.line, e.spec))
		}
	}
	return out
}

// Diff is an example the baseline passes and glovebox does not.
type Diff struct {
	Record          // glovebox's record (Outcome 0 when glovebox never reported it)
	Reason   string // the accepted-differences reason, if any
	FileNote string // why glovebox did not report it, when it did not
}

// compare returns the examples the baseline passed that glovebox failed,
// raised in, or never reported (its file timed out, crashed or did not
// load), sorted by file and description.
func compare(gb, base *SideResult, acc *Accepted) []Diff {
	got := map[string]Record{}
	for _, r := range gb.Records {
		got[r.Key()] = r
	}
	var diffs []Diff
	for _, r := range base.Records {
		if r.Outcome != Pass {
			continue
		}
		g, ok := got[r.Key()]
		if ok && g.Outcome == Pass {
			continue
		}
		d := Diff{Record: g}
		if !ok {
			d.Record = Record{File: r.File, Desc: r.Desc}
			d.FileNote = gb.fileNote(r.File)
		}
		d.Reason = acc.match(d.Record)
		diffs = append(diffs, d)
	}
	sort.SliceStable(diffs, func(i, j int) bool {
		if diffs[i].File != diffs[j].File {
			return diffs[i].File < diffs[j].File
		}
		return diffs[i].Desc < diffs[j].Desc
	})
	return diffs
}

// SideResult is everything one side reported.
type SideResult struct {
	Name    string
	Records []Record
}

// fileNote summarises what went wrong with a file outside its examples.
func (s *SideResult) fileNote(file string) string {
	var notes []string
	for _, r := range s.Records {
		if r.File == file && (r.Outcome == Outside || r.Outcome == Aborted) {
			notes = append(notes, r.Message)
		}
	}
	if len(notes) == 0 {
		return "no record (a guard left it out, or the file stopped early)"
	}
	return strings.Join(notes, "; ")
}

// Tally is one table cell group: examples, failures, errors.
type Tally struct{ Files, Examples, Failures, Errors int }

func (t *Tally) add(r Record) {
	switch r.Outcome {
	case Pass:
		t.Examples++
	case Fail:
		t.Examples++
		t.Failures++
	case Error:
		t.Examples++
		t.Errors++
	case Outside, Aborted:
		t.Errors++
	}
}

// group names a spec file's table row: core/<dir>, library/<dir>, or
// language.
func group(file string) string {
	parts := strings.Split(file, "/")
	if len(parts) >= 3 && (parts[0] == "core" || parts[0] == "library") {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
