#!/usr/bin/env bash
# The platform gems as a user gets them (make gem-test, after make gem):
#  - the x86_64-linux gem installs into an empty GEM_HOME; with an empty
#    HOME (no glovebox cache) and a PATH holding Ruby alone (no Go, npm or
#    glovebox), examples/first.rb, as the installed gem ships it, runs first, as a new user's first
#    command, timed to its result, using the compiled modules the gem ships
#    (its log names them; no line says "compiling"); then the gem's
#    `glovebox` command runs setup (compiling nothing) and evals on the
#    packed binary and image, Glovebox.setup and a sandbox work from Ruby,
#    and rails.rb and first.rb run end to end where the gem installed
#    them;
#  - each platform gem packs its architecture's compiled modules, named
#    in its binary;
#  - the aarch64-linux gem's binary is an aarch64 ELF and, when
#    qemu-aarch64-static is installed, prints its version under it;
#  - the plain gem's `glovebox` says how to get a binary when there is
#    none, and runs one given by GLOVEBOX_BIN.
# Prints each step's time; exits non-zero on the first failure, or at the
# end when an example is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "installed_gem: FAIL: $*" >&2; exit 1; }
step() { echo "installed_gem: $*" >&2; }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

for c in ruby gem file; do command -v "$c" >/dev/null || fail "$c is not installed"; done
v=$(ruby -e 'require "./ruby/lib/glovebox/version"; print Glovebox::VERSION')
gx=ruby/pkg/glovebox-$v-x86_64-linux.gem
ga=ruby/pkg/glovebox-$v-aarch64-linux.gem
gp=ruby/pkg/glovebox-$v.gem
for g in "$gx" "$ga" "$gp"; do [ -f "$g" ] || fail "$g is missing: run make gem"; done
(cd ruby/pkg && sha256sum -c --quiet SHA256SUMS) || fail "ruby/pkg/SHA256SUMS does not match the gems"
(cd dist && sha256sum -c --quiet SHA256SUMS) || fail "dist/SHA256SUMS does not match the archives"
ls -l ruby/pkg/*.gem dist/*.tar.gz >&2

t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT

# The aarch64 gem: unpack its binary, check the architecture, run it.
mkdir -p "$t/a64"
tar -xOf "$ga" data.tar.gz | tar -xzf - -C "$t/a64"
a64="$t/a64/lib/glovebox/native/glovebox"
[ -f "$t/a64/lib/glovebox/native/ruby+stdlib.wasm" ] || fail "the aarch64 gem lacks the Ruby image"
for g in "$ga" "$gx"; do
  n=$(tar -xOf "$g" data.tar.gz | tar -tzf - | grep -c '^lib/glovebox/native/ruby-\(plain\|metered\)-.*\.cwasm$' || true)
  [ "$n" = 2 ] || fail "$g packs $n compiled modules, want 2 (plain and metered)"
done
ls "$t/a64/lib/glovebox/native/" >&2
out=$(file "$a64")
echo "$out" >&2
grep -q 'ELF 64-bit LSB.*ARM aarch64.*statically linked' <<<"$out" || fail "the aarch64 gem's binary is not a static aarch64 ELF"
if command -v qemu-aarch64-static >/dev/null; then
  out=$(qemu-aarch64-static "$a64" version)
  echo "$out" >&2
  grep -q "^glovebox $v" <<<"$out" || fail "the aarch64 binary did not print its version under qemu-aarch64-static"
else
  step "qemu-aarch64-static is not installed: the aarch64 binary is checked by file(1) only"
fi

if [ "$(uname -m)" != x86_64 ]; then
  step "this host is $(uname -m): the x86_64-linux gem is not installed here"
  exit 0
fi

# An empty GEM_HOME and HOME, and a PATH with Ruby and nothing else.
mkdir -p "$t/bin" "$t/home" "$t/gems" "$t/app"
for x in ruby env sh; do ln -s "$(command -v $x)" "$t/bin/$x"; done
GEM_HOME="$t/gems" gem install --local --no-document "$gx" >&2 || fail "gem install $gx"
clean() { env -i HOME="$t/home" GEM_HOME="$t/gems" GEM_PATH="$t/gems" PATH="$t/bin" LANG=C.UTF-8 "$@"; }
clean sh -c 'command -v go || command -v npm || command -v glovebox' && fail "the clean PATH has go, npm or glovebox"
gb="$t/gems/bin/glovebox" # RubyGems' binstub of exe/glovebox
file -L "$t/gems/gems/glovebox-$v-x86_64-linux/lib/glovebox/native/glovebox" | grep -q 'x86-64.*statically linked' ||
  fail "the installed x86_64 binary is not a static x86-64 ELF"

clean "$gb" version | grep -q "^glovebox $v" || fail "glovebox version through the gem's command"

# A new user's first command: the README's first example, in the empty
# HOME, timed to its first result. The gem's compiled modules spare it
# the compile: the child's log says it used them and never that it
# compiled (the gem's default logger keeps warnings only, so info.rb,
# loaded first, turns it up to info, as an app would to watch).
cp "$t/gems/gems/glovebox-$v-x86_64-linux/examples/first.rb" "$t/app/" ||
  fail "examples/first.rb is not in the installed gem"
printf 'require "glovebox"\nGlovebox.logger.level = Logger::INFO\n' >"$t/app/info.rb"
load=$(cut -d' ' -f1-3 /proc/loadavg)
s=$(now)
(cd "$t/app" && clean ruby -r./info.rb first.rb) >"$t/first.out" 2>&1 || { cat "$t/first.out" >&2; fail "ruby/examples/first.rb from the installed gem, cold cache"; }
step "ruby/examples/first.rb, fresh install and empty cache, to its first result: $(took "$s") (load $load)"
sed 's/^/  | /' "$t/first.out" | head -20 >&2
grep -q '^"ok"$' "$t/first.out" || fail "first.rb did not print \"ok\""
grep -q "using the compiled module shipped beside the binary" "$t/first.out" || fail "first.rb's log does not say it used the shipped module"
grep -qi "compiling" "$t/first.out" && fail "first.rb compiled the Ruby image on a fresh install"

s=$(now)
clean "$gb" setup >"$t/setup.out" 2>&1 || { cat "$t/setup.out" >&2; fail "glovebox setup through the gem's command"; }
step "glovebox setup after it (the metered image from the gem, its snapshot booted): $(took "$s")"
sed 's/^/  | /' "$t/setup.out" >&2
grep -qi "compiling" "$t/setup.out" && fail "glovebox setup compiled an image the gem ships"
[ -z "$(find "$t/home" -name '*.cwasm.tmp-*')" ] || fail "a temporary copy of a shipped module was left in the cache"
[ ! -e "$t/home/.npm" ] && [ -z "$(find "$t/home" -name 'ruby+stdlib.wasm')" ] ||
  fail "setup fetched the image with npm instead of using the one beside the binary"
[ "$(clean "$gb" eval -e '[1, 2, 3].sum * 7')" = "=> 42" ] || fail "glovebox eval through the gem's command"
[ "$(clean "$gb" eval --fuel 100000000 -e '6 * 7')" = "=> 42" ] || fail "a fuel-metered eval"

s=$(now)
clean ruby -e '
  require "glovebox"
  require "stringio"
  Glovebox::Native.packed? or abort "the gem packs no binary"
  Glovebox::Native.binary.start_with?(ENV["GEM_HOME"]) or abort "binary #{Glovebox::Native.binary} is not the gem'"'"'s"
  line = Glovebox.setup(log: StringIO.new)
  line.start_with?("glovebox is ready") or abort line
  out = IO.popen([Gem.bin_path("glovebox", "glovebox"), "eval", "-e", "1+1"], &:read)
  out == "=> 2\n" or abort "the wrapper printed #{out.inspect}"
' || fail "Glovebox.setup and the wrapper from Ruby"
step "Glovebox.setup (warm) and an eval through the wrapper from Ruby: $(took "$s")"

missing=()
# The examples run where the gem installed them too (ruby "$(gem
# contents glovebox | grep rails.rb)"): their tools are the user's,
# though they sit under GEM_HOME.
for ex in rails first; do
  src=$t/gems/gems/glovebox-$v-x86_64-linux/examples/$ex.rb
  if [ ! -f "$src" ]; then
    missing+=("examples/$ex.rb (not in the installed gem)")
    continue
  fi
  s=$(now)
  (cd "$t/app" && clean ruby "$src") >"$t/$ex.out" 2>&1 || { cat "$t/$ex.out" >&2; fail "examples/$ex.rb where the gem installed it"; }
  step "examples/$ex.rb where the gem installed it: ok in $(took "$s")"
  sed 's/^/  | /' "$t/$ex.out" | head -20 >&2
done

# The plain gem: no binary packed; its command explains, or runs
# GLOVEBOX_BIN.
mkdir -p "$t/plain"
GEM_HOME="$t/plain" gem install --local --no-document "$gp" >&2 || fail "gem install $gp"
plain() { env -i HOME="$t/home" GEM_HOME="$t/plain" GEM_PATH="$t/plain" PATH="$t/bin" LANG=C.UTF-8 "$@"; }
set +e
msg=$(plain "$t/plain/bin/glovebox" version 2>&1)
rc=$?
set -e
[ "$rc" = 127 ] && grep -q "no glovebox binary" <<<"$msg" || fail "the plain gem without a binary: exit $rc: $msg"
plain GLOVEBOX_BIN="$t/gems/gems/glovebox-$v-x86_64-linux/lib/glovebox/native/glovebox" "$t/plain/bin/glovebox" version |
  grep -q "^glovebox $v" || fail "the plain gem with GLOVEBOX_BIN"

if ((${#missing[@]})); then
  fail "missing: ${missing[*]} (the embedded examples; everything else passed)"
fi
step "ok"
