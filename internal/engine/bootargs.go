package engine

import "slices"

// BootArgs returns the argv Ruby is initialised with (ruby-init) when a
// boot snapshot is built, for tools that boot the same image another way
// and must match it (the ruby/spec baseline in conformance/). The slice is
// the caller's.
func BootArgs() []string { return slices.Clone(rubyArgs) }
