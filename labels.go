package glovebox

import (
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gloveboxhq/glovebox/internal/wire"
)

// Kind names what a labelled value is: one of the kinds below or one the
// host defines. A kind is lower-case letters, digits and _, starting with
// a letter, at most 32 bytes: it appears in tokens ("[[email:7f3a]]") and
// in the messages of refused calls.
type Kind string

// The kinds glovebox knows. Phone and card values are also matched by
// their digits alone (separators and spacing removed) at sinks and in
// output.
const (
	KindEmail  Kind = "email"
	KindPhone  Kind = "phone"
	KindCard   Kind = "card"
	KindSecret Kind = "secret"
	KindName   Kind = "name"
)

var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Label marks sensitive values in a tool's results (see
// [Toolset.Label]). Exactly one of Path and Find is set.
//
// Path names fields of the result as the guest receives it (its data
// form: Hashes with String keys, Arrays): keys separated by ".", "*" for
// every key or element, a decimal number for one element; "." alone is
// the whole result. Arrays are
// walked through when a key is asked of them, so "email" marks the email
// of a profile and of every profile in a list, and "notes.body" the
// body of every note. A String leaf is labelled, an Integer leaf by its
// decimal digits, an Array leaf element by element; a path that finds
// nothing labels nothing.
//
// Find is given the whole result in its data form and returns the
// sensitive strings in it (whole values or parts of longer strings, such
// as the emails inside a ticket's text; see [FindEmails]). It runs on
// the eval's goroutine for every call of the tool and must not keep v.
type Label struct {
	Kind Kind
	Path string
	Find func(v any) []string
}

// SinkPolicy says which labelled kinds a tool's arguments may carry (see
// [Toolset.Sink]). The zero value accepts none and refuses the call.
type SinkPolicy struct {
	// Accepts lists the kinds the tool may receive: a labelled value of
	// such a kind, or its token, reaches the tool as the real value.
	Accepts []Kind
	// Approve sends a call carrying any other kind to [Hooks].Approver
	// instead of refusing it outright; the call runs if the approver
	// allows it (the token then reaches the tool as the real value).
	Approve bool
}

// flowSpec is the data-flow policy of a Toolset: labels on results, and
// sinks.
type flowSpec struct {
	labels map[string][]Label
	sinks  map[string]SinkPolicy
}

func (f *flowSpec) clone() *flowSpec {
	if f == nil {
		return nil
	}
	out := &flowSpec{labels: map[string][]Label{}, sinks: map[string]SinkPolicy{}}
	for k, v := range f.labels {
		out.labels[k] = slices.Clone(v)
	}
	for k, v := range f.sinks {
		v.Accepts = slices.Clone(v.Accepts)
		out.sinks[k] = v
	}
	return out
}

// Label declares that the results of the tool named tool carry sensitive
// values (see [Label]). From then on the data-flow policy is on for every
// Runtime made from s: each labelled value handed to the guest is
// recorded for the eval (or the [Session]), everything the Result shows
// — Value, Stdout, Stderr, Error, the transcript — has it replaced by a
// token such as "[[email:7f3a]]" (the same value gives the same token
// within a session), and every tool's arguments are checked: a tool
// receives only the kinds its [SinkPolicy] accepts ([Toolset.Sink]; a
// tool without one accepts none). Guest code computes with the real
// values, and so do the hooks (BeforeCall, AfterCall, Approver: they are
// the host's); [Result.Reveal] turns tokens back into values. Once an
// eval holds a labelled value, the Result's transcript shows each tool's
// result in its data form (maps and slices, as the guest got it) rather
// than as the Go value the tool returned. See docs/dataflow.md.
//
// It fails with [ErrInvalidTool] when no tool has the name, a kind is not
// a valid [Kind], a label sets both or neither of Path and Find, or a
// path has an empty segment.
func (s *Toolset) Label(tool string, labels ...Label) error {
	if _, ok := s.tools[tool]; !ok {
		return fmt.Errorf("%w: Label(%q): no tool has that name; register it first", ErrInvalidTool, tool)
	}
	for _, l := range labels {
		if err := l.check(); err != nil {
			return fmt.Errorf("%w: Label(%q): %v", ErrInvalidTool, tool, err)
		}
	}
	s.flowSpec().labels[tool] = append(s.flowSpec().labels[tool], labels...)
	return nil
}

// Sink sets which labelled kinds the arguments of the tool named tool may
// carry (replacing an earlier policy). A call whose arguments hold a
// labelled value of another kind — exact, inside a longer string, in
// other case, spacing or punctuation, with the separators of a card or
// phone number changed, in base64, in hex, as byte codes, escaped,
// URL-encoded, reversed, in ROT13, or split across the call's strings
// (docs/dataflow.md lists them) — or a token of one, is refused before it
// runs: the guest gets Glovebox::ToolDenied naming the kind (rescuable),
// and the transcript entry has OutcomeDenied. With p.Approve the
// [Hooks].Approver decides instead. A token the eval or session did not
// make is refused the same way. Sink alone does not turn the policy on
// (see [Toolset.Label]).
//
// It fails with [ErrInvalidTool] when no tool has the name or a kind is
// not a valid [Kind].
func (s *Toolset) Sink(tool string, p SinkPolicy) error {
	if _, ok := s.tools[tool]; !ok {
		return fmt.Errorf("%w: Sink(%q): no tool has that name; register it first", ErrInvalidTool, tool)
	}
	for _, k := range p.Accepts {
		if !kindPattern.MatchString(string(k)) {
			return fmt.Errorf("%w: Sink(%q): kind %q is not lower-case letters, digits and _ (at most 32)", ErrInvalidTool, tool, k)
		}
	}
	p.Accepts = slices.Clone(p.Accepts)
	s.flowSpec().sinks[tool] = p
	return nil
}

func (s *Toolset) flowSpec() *flowSpec {
	if s.flow == nil {
		s.flow = &flowSpec{labels: map[string][]Label{}, sinks: map[string]SinkPolicy{}}
	}
	return s.flow
}

// mergeFlow copies the policy of the tool name from o into s.
func (s *Toolset) mergeFlow(o *Toolset, name string) {
	if o.flow == nil {
		return
	}
	if l, ok := o.flow.labels[name]; ok {
		s.flowSpec().labels[name] = slices.Clone(l)
	}
	if p, ok := o.flow.sinks[name]; ok {
		p.Accepts = slices.Clone(p.Accepts)
		s.flowSpec().sinks[name] = p
	}
}

func (l Label) check() error {
	if !kindPattern.MatchString(string(l.Kind)) {
		return fmt.Errorf("kind %q is not lower-case letters, digits and _ (at most 32)", l.Kind)
	}
	if (l.Path == "") == (l.Find == nil) {
		return fmt.Errorf("a label sets exactly one of Path and Find")
	}
	if l.Path != "" && l.Path != "." && slices.Contains(strings.Split(l.Path, "."), "") {
		return fmt.Errorf("path %q has an empty segment", l.Path)
	}
	return nil
}

// found is one labelled value a tool returned.
type found struct {
	kind  Kind
	value string
}

// collect returns the values labels mark in v, a tool's result as Go
// returned it: it is taken to its data form first (as the guest gets it).
func collectLabels(labels []Label, v any) []found {
	data := v
	b, err := wire.Encode(nil, v, maxToolDepth)
	if err == nil {
		if d, err := wire.Decode(b); err == nil {
			data = d
		}
	}
	var out []found
	for _, l := range labels {
		if l.Find != nil {
			for _, s := range l.Find(data) {
				out = append(out, found{l.Kind, s})
			}
			continue
		}
		var path []string // "." is the whole result
		if l.Path != "." {
			path = strings.Split(l.Path, ".")
		}
		walkPath(data, path, func(s string) { out = append(out, found{l.Kind, s}) })
	}
	return out
}

// walkPath calls leaf with each string the path reaches in v.
func walkPath(v any, path []string, leaf func(string)) {
	if len(path) == 0 {
		switch x := v.(type) {
		case string:
			leaf(x)
		case []byte:
			leaf(string(x))
		case int64:
			leaf(strconv.FormatInt(x, 10))
		case *big.Int:
			leaf(x.String())
		case []any:
			for _, e := range x {
				walkPath(e, nil, leaf)
			}
		}
		return
	}
	seg, rest := path[0], path[1:]
	switch x := v.(type) {
	case map[string]any:
		if seg == "*" {
			for _, e := range x {
				walkPath(e, rest, leaf)
			}
		} else if e, ok := x[seg]; ok {
			walkPath(e, rest, leaf)
		}
	case []any:
		if seg == "*" {
			for _, e := range x {
				walkPath(e, rest, leaf)
			}
		} else if i, err := strconv.Atoi(seg); err == nil {
			if i >= 0 && i < len(x) {
				walkPath(x[i], rest, leaf)
			}
		} else {
			for _, e := range x {
				walkPath(e, path, leaf)
			}
		}
	}
}

var emailPattern = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`)

// FindEmails is a [Label] Find function: the email addresses in every
// string of v (values and keys, at any depth), as a simple pattern
// (local@domain.tld) finds them.
func FindEmails(v any) []string {
	var out []string
	eachString(v, func(s string) { out = append(out, emailPattern.FindAllString(s, -1)...) })
	return out
}

// eachString calls f with every string in the data v, keys included.
func eachString(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case []any:
		for _, e := range x {
			eachString(e, f)
		}
	case map[string]any:
		for k, e := range x {
			f(k)
			eachString(e, f)
		}
	}
}

// annotate sets each doc's Labelled and Accepts from the policy, when it
// is on.
func (f *flowSpec) annotate(docs []ToolDoc) {
	if f == nil || len(f.labels) == 0 {
		return
	}
	for i := range docs {
		var kinds []Kind
		for _, l := range f.labels[docs[i].Name] {
			kinds = append(kinds, l.Kind)
		}
		docs[i].Labelled = uniqKinds(kinds)
		docs[i].Accepts = uniqKinds(slices.Clone(f.sinks[docs[i].Name].Accepts))
	}
}

func uniqKinds(k []Kind) []Kind {
	slices.Sort(k)
	return slices.Compact(k)
}
