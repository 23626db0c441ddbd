#!/bin/sh
# ctest install_tree (install.cmake): install this build and check the tree.
set -eu
cmake=${1:?usage: run.sh CMAKE BUILD_DIR}
build=${2:?usage: run.sh CMAKE BUILD_DIR}
fail() { echo "install_tree: FAIL: $*" >&2; exit 1; }
ok() { echo "install_tree: ok: $*"; }

tmp=$(mktemp -d /tmp/sbx-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
p=$tmp/prefix
"$cmake" --install "$build" --prefix "$p" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "cmake --install"; }

# ---- every file is there ----
libdir=$(dirname "$(find "$p" -name libsandbox.so.0 | head -n1)")
[ -n "$libdir" ] && [ "$libdir" != . ] || fail "no libsandbox.so.0 under $p"
for f in bin/sandboxd bin/sbxctl bin/silkd include/sandbox/sandbox.h include/sandbox/version.h \
         lib/systemd/system/sandboxd.service lib/tmpfiles.d/sandboxd.conf etc/sandboxd/config.json \
         share/bash-completion/completions/sbxctl share/zsh/vendor-completions/_sbxctl \
         share/fish/vendor_completions.d/sbxctl.fish \
         share/man/man1/sbxctl.1 share/man/man8/sandboxd.8 share/man/man5/sandboxd.json.5 \
         libexec/sandbox/build-guest-image libexec/sandbox/build-template-debian \
         libexec/sandbox/guest/init libexec/sandbox/guest/sbx-identity.c; do
  [ -s "$p/$f" ] || fail "not installed: $f"
done
for f in libsandbox.so libsandbox.a pkgconfig/sandbox.pc cmake/Sandbox/SandboxConfig.cmake; do
  [ -e "$libdir/$f" ] || fail "not installed: $libdir/$f"
done
for f in bin/sandboxd bin/sbxctl bin/silkd libexec/sandbox/build-guest-image libexec/sandbox/build-template-debian \
         libexec/sandbox/guest/init; do
  [ -x "$p/$f" ] || fail "not executable: $f"
done
ok "every file installed under $p"

# ---- the unit: Type=notify, paths from the prefix, verified by systemd ----
unit=$p/lib/systemd/system/sandboxd.service
grep -qx "Type=notify" "$unit" || fail "unit is not Type=notify"
grep -qx "ExecStart=$p/bin/sandboxd --config $p/etc/sandboxd/config.json" "$unit" ||
  fail "unit ExecStart is not from the prefix: $(grep ExecStart= "$unit")"
! grep -n "@SBX_" "$unit" || fail "unit keeps a placeholder"
if command -v systemd-analyze >/dev/null 2>&1; then
  # --man=no: the prefix's man pages are not on MANPATH.
  out=$(systemd-analyze verify --man=no "$unit" 2>&1) || fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify warns: $out"
  ok "unit verified by systemd-analyze"
else
  echo "install_tree: systemd-analyze is missing (Debian: systemd); unit checked by text only"
fi

# ---- tmpfiles: creates the state, run and cache dirs with their modes ----
root=$tmp/root
mkdir -p "$root"
systemd-tmpfiles --root="$root" --create "$p/lib/tmpfiles.d/sandboxd.conf" || fail "systemd-tmpfiles --create"
for d in /var/lib/sandboxd:700 /var/lib/sandboxd/templates:755 /var/lib/sandboxd/run:700 /var/cache/sandbox:755 \
         /run/sandbox-local:700; do
  mode=$(stat -c %a "$root${d%%:*}" 2>/dev/null) || fail "tmpfiles did not create ${d%%:*}"
  [ "$mode" = "${d##*:}" ] || fail "${d%%:*} has mode $mode, want ${d##*:}"
done
ok "tmpfiles entry creates its directories"

# ---- example config: valid, loopback ----
conf=$p/etc/sandboxd/config.json
out=$("$p/bin/sandboxd" --config "$conf" --check-config 2>&1) || fail "--check-config: $out"
case $out in "config ok: listen 127.0.0.1:"*) ;; *) fail "--check-config said: $out" ;; esac
grep -q '"listen": "127.0.0.1:' "$conf" || fail "example config does not listen on loopback"
ok "example config passes --check-config and binds 127.0.0.1"

# ---- completions: the installed files are `sbxctl completion SHELL`, and load ----
for sh in bash:share/bash-completion/completions/sbxctl zsh:share/zsh/vendor-completions/_sbxctl \
          fish:share/fish/vendor_completions.d/sbxctl.fish; do
  "$p/bin/sbxctl" completion "${sh%%:*}" | cmp -s - "$p/${sh#*:}" || fail "${sh#*:} differs from sbxctl completion ${sh%%:*}"
done
bcomp=$p/share/bash-completion/completions/sbxctl
out=$(bash -c '. "$1"; complete -p sbxctl' sh "$bcomp") || fail "bash could not load $bcomp"
[ "$out" = "complete -F _sbxctl sbxctl" ] || fail "bash: complete -p sbxctl said: $out"
# What a user gets after typing `sbxctl cl<TAB>` and `sbxctl claim --size <TAB>`.
out=$(bash -c '. "$1"; COMP_WORDS=(sbxctl cl); COMP_CWORD=1; _sbxctl; echo "${COMPREPLY[*]}"' sh "$bcomp")
[ "$out" = claim ] || fail "bash: sbxctl cl<TAB> gave '$out'"
out=$(bash -c '. "$1"; COMP_WORDS=(sbxctl claim --size ""); COMP_CWORD=3; _sbxctl; echo "${COMPREPLY[*]}"' sh "$bcomp")
[ "$out" = "small medium large xlarge 2xlarge" ] || fail "bash: claim --size <TAB> gave '$out'"
out=$(bash -c '. "$1"; COMP_WORDS=(sbxctl completion ""); COMP_CWORD=2; _sbxctl; echo "${COMPREPLY[*]}"' sh "$bcomp")
[ "$out" = "bash zsh fish" ] || fail "bash: completion <TAB> gave '$out'"
ok "bash completion loads and completes"
rc=0; err=$("$p/bin/sbxctl" completion tcsh 2>&1 >/dev/null) || rc=$?
[ "$rc" = 2 ] || fail "sbxctl completion tcsh: exit $rc, want 2"
[ "$err" = 'sbxctl: completion: unknown shell "tcsh" (expected bash, zsh or fish)' ] || fail "sbxctl completion tcsh said: $err"
if command -v zsh >/dev/null 2>&1; then
  zcomp=$p/share/zsh/vendor-completions/_sbxctl
  zsh -n "$zcomp" || fail "zsh -n $zcomp"
  out=$(zsh -fc 'fpath=("$1" $fpath); autoload -Uz compinit; compinit -u -d "$2/zcompdump"; print -r -- ${_comps[sbxctl]}' \
    sh "$(dirname "$zcomp")" "$tmp") || fail "zsh compinit"
  [ "$out" = _sbxctl ] || fail "zsh: sbxctl completes with '$out', want _sbxctl"
  ok "zsh completion registers _sbxctl"
fi
if command -v fish >/dev/null 2>&1; then
  fcomp=$p/share/fish/vendor_completions.d/sbxctl.fish
  fish -n "$fcomp" || fail "fish -n $fcomp"
  out=$(HOME=$tmp fish -c "source '$fcomp'; complete -C 'sbxctl cl'" | cut -f1) || fail "fish could not load $fcomp"
  [ "$out" = claim ] || fail "fish: sbxctl cl<TAB> gave '$out'"
  out=$(HOME=$tmp fish -c "source '$fcomp'; complete -C 'sbxctl claim --net '" | cut -f1 | tr '\n' ' ')
  [ "$out" = "egress none " ] || fail "fish: claim --net <TAB> gave '$out'"
  ok "fish completion loads and completes"
fi

# ---- man pages render without a warning ----
for m in man1/sbxctl.1 man8/sandboxd.8 man5/sandboxd.json.5; do
  f=$p/share/man/$m
  out=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$f" 2>&1) || fail "groff $m"
  [ -z "$out" ] || fail "groff warns on $m: $out"
  if command -v man >/dev/null 2>&1; then
    lines=$(MANWIDTH=80 man -l "$f" 2>"$tmp/man.err" | wc -l)
    [ ! -s "$tmp/man.err" ] || fail "man -l $m: $(cat "$tmp/man.err")"
    [ "$lines" -gt 20 ] || fail "man -l $m rendered $lines lines"
  fi
done
ok "man pages render without warnings"

# ---- the build scripts run from libexec ----
"$p/libexec/sandbox/build-template-debian" --help >/dev/null || fail "build-template-debian --help"
"$p/libexec/sandbox/build-guest-image" --help >/dev/null || fail "build-guest-image --help"
ok "libexec scripts run"

# ---- the packages' layout: prefix /usr puts the config in /etc ----
d=$tmp/destdir
DESTDIR=$d "$cmake" --install "$build" --prefix /usr --component sandboxd >"$tmp/install2.log" ||
  { cat "$tmp/install2.log" >&2; fail "DESTDIR install"; }
[ -s "$d/etc/sandboxd/config.json" ] || fail "prefix /usr: no $d/etc/sandboxd/config.json"
grep -qx "ExecStart=/usr/bin/sandboxd --config /etc/sandboxd/config.json" "$d/usr/lib/systemd/system/sandboxd.service" ||
  fail "prefix /usr: unit ExecStart is $(grep ExecStart= "$d/usr/lib/systemd/system/sandboxd.service")"
# An operator's config survives a reinstall.
echo '{"listen":"127.0.0.1:7778"}' >"$d/etc/sandboxd/config.json"
DESTDIR=$d "$cmake" --install "$build" --prefix /usr --component sandboxd >/dev/null
grep -q 7778 "$d/etc/sandboxd/config.json" || fail "reinstall replaced the operator's config"
ok "prefix /usr: /etc/sandboxd/config.json, /usr/bin/sandboxd in the unit; an existing config is kept"
echo "install_tree: PASS"
