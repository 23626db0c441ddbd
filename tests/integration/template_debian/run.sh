#!/bin/sh
# ctest template_debian: build a Debian template with the project's script and
# run sandboxes on it. The template is cached under SBX_TEST_CACHE (default
# /var/cache/sandbox-tests) so that the normal and sanitizer runs of one CI job
# debootstrap once; the cache is keyed by the script's checksum, so a changed
# script is built again.
set -eu
src=${1:?usage: run.sh SOURCE_DIR BUILD_BIN_DIR}
bin=${2:?usage: run.sh SOURCE_DIR BUILD_BIN_DIR}
script=$src/scripts/build-template-debian
cache=${SBX_TEST_CACHE:-/var/cache/sandbox-tests}
fail() {
  echo "template_debian: FAIL: $*" >&2
  [ -z "${sbxd:-}" ] || [ ! -f "$sbxd/log" ] || { echo "sandboxd log tail:" >&2; tail -20 "$sbxd/log" >&2; }
  exit 1
}

# Usage errors exit 2 and build nothing.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
rc=0; "$script" >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "no arguments: exit $rc, want 2"
rc=0; "$script" "$scratch" ../x >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "name ../x: exit $rc, want 2"
rc=0; "$script" --bogus "$scratch" x >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "unknown option: exit $rc, want 2"
# A failed build (a mirror nobody listens on) leaves no template behind.
rc=0; "$script" --mirror http://127.0.0.1:9/debian "$scratch" broken >/dev/null 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "an unreachable mirror built a template"
[ -z "$(ls -A "$scratch")" ] || fail "a failed build left $(ls -A "$scratch") in the templates dir"

mkdir -p "$cache"
exec 9>"$cache/.template_debian.lock"
flock 9
key=$(sha256sum "$script" | cut -c1-16)
templates=$cache/templates-$key
if [ ! -d "$templates/debian/rootfs" ]; then
  rm -rf "$cache"/templates-*
  echo "template_debian: building the template (debootstrap)" >&2
  "$script" "$templates" debian >&2 || fail "build-template-debian failed"
fi
flock -u 9
root=$templates/debian/rootfs
[ -s "$root/etc/debian_version" ] || fail "no /etc/debian_version in the template"
[ ! -s "$root/etc/machine-id" ] || fail "the template carries a machine-id"
! ls "$root"/etc/ssh/ssh_host_* >/dev/null 2>&1 || fail "the template carries SSH host keys"

# sbxctl local run finds templates under $SBX_STATE_DIR/templates.
state=$scratch/state
mkdir -p "$state"
ln -s "$templates" "$state/templates"
# silkd runs from the template's root, which has none of the host's
# libraries: a sanitizer build's silkd is dynamic (libasan), so there the
# static silkd of the normal build (./scripts/test builds it first) serves.
silkd=$bin/silkd
if readelf -l "$silkd" 2>/dev/null | grep -q 'Requesting program interpreter'; then
  silkd=${SBX_STATIC_SILKD:-$src/build/bin/silkd}
  readelf -l "$silkd" 2>/dev/null | grep -q 'Requesting program interpreter' &&
    fail "$bin/silkd is dynamic (sanitizer build) and no static silkd at $silkd (run ./scripts/test first or set SBX_STATIC_SILKD)"
  [ -x "$silkd" ] || fail "no static silkd at $silkd (run ./scripts/test first or set SBX_STATIC_SILKD)"
fi
run() { SBX_STATE_DIR=$state SBX_RUN_DIR=$scratch/run SBX_SILKD=$silkd "$bin/sbxctl" local run --template debian -- "$@"; }

out=$(run python3 -c 'print(6*7)') || fail "python3 in the template: exit $?"
[ "$out" = 42 ] || fail "python3 printed '$out', want 42"
out=$(run git --version) || fail "git in the template: exit $?"
case $out in "git version "*) ;; *) fail "git printed '$out'" ;; esac
# The root is the template's, not the host's: the host has cmake (it built
# this test), a minbase template does not.
dpkg-query -W cmake >/dev/null 2>&1 || fail "the host lacks cmake, so this check proves nothing"
rc=0; run dpkg-query -W cmake >/dev/null 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "cmake is installed inside the sandbox: the root is not the template"
# Writes stay in the sandbox's layer: the template is unchanged afterwards.
run sh -c 'echo scratch > /etc/sbx-written && cat /etc/sbx-written' >/dev/null || fail "write in the sandbox failed"
[ ! -e "$root/etc/sbx-written" ] || fail "a sandbox's write reached the template"
rc=0; run test -e /etc/sbx-written || rc=$?
[ "$rc" = 1 ] || fail "a second sandbox sees the first one's write (exit $rc)"
# openssh-server is installed, not started: nothing in a sandbox starts it,
# and the template carries no host keys, so a sandbox makes its own.
run sh -c 'mkdir -p /run/sshd && ssh-keygen -A >/dev/null && /usr/sbin/sshd -t' || fail "sshd in the template is not usable"
[ -s "$root/etc/silkd/lsp.d/python" ] || fail "no LSP manifest for python in the template"

# silkd's git verbs and LSP broker through a real sandboxd: sbxctl talks to
# the sandbox's silkd over the upgraded agent connection.
sbxd=$scratch/sbxd
mkdir -p "$sbxd/data" "$scratch/xdg"
cg=sbx-template-debian-$$
printf '{"listen":"127.0.0.1:0","data_dir":"%s","driver":"jail","api_token":"template-debian-token","templates_dir":"%s","jail":{"cgroup_root":"%s"}}\n' \
  "$sbxd/data" "$templates" "$cg" > "$sbxd/config.json"
SANDBOXD_SILKD=$silkd "$bin/sandboxd" --config "$sbxd/config.json" 2>"$sbxd/log" &
sbxd_pid=$!
id=
stop_all() {
  [ -z "$id" ] || "$bin/sbxctl" release "$id" >/dev/null 2>&1 || true
  # drain destroys what is warm: a SIGTERM leaves it running for the next start
  [ -z "${port:-}" ] || "$bin/sbxctl" drain >/dev/null 2>&1 || true
  # SIGTERM, then SIGKILL if sandboxd has not stopped within 30 s: the test
  # must end either way (released sandboxes are gone already)
  kill "$sbxd_pid" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$sbxd_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$sbxd_pid" 2>/dev/null || true
  wait "$sbxd_pid" 2>/dev/null || true
  # Whatever is still in the test's cgroup (a destroy cut short by the stop)
  # goes too: a jail dies with its pid 1. Nothing of the test outlives it.
  for f in /sys/fs/cgroup/*/"$cg"/*/cgroup.procs /sys/fs/cgroup/"$cg"/*/cgroup.procs; do
    [ ! -f "$f" ] || xargs -r kill -9 <"$f" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    left=0
    for h in /sys/fs/cgroup/*/"$cg"/* /sys/fs/cgroup/"$cg"/*; do
      [ -d "$h" ] || continue
      rmdir "$h" 2>/dev/null || left=1
    done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for h in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do [ ! -d "$h" ] || rmdir "$h" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap stop_all EXIT INT TERM
port=
for _ in $(seq 600); do
  port=$(sed -n 's/.*sandboxd: ready port=\([0-9]*\).*/\1/p' "$sbxd/log")
  [ -z "$port" ] || break
  kill -0 "$sbxd_pid" 2>/dev/null || fail "sandboxd exited: $(tail -5 "$sbxd/log")"
  sleep 0.1
done
[ -n "$port" ] || fail "sandboxd did not start: $(tail -5 "$sbxd/log")"
export SANDBOXD_ADDR=127.0.0.1:$port SANDBOXD_TOKEN=template-debian-token XDG_STATE_HOME=$scratch/xdg
ctl() { "$bin/sbxctl" "$@"; }
id=$(ctl claim debian) || fail "claim debian: $(tail -5 "$sbxd/log")"
py='def twice(x):
    """Double x."""
    return 2 * x


print(twice(21))
'
ctl exec "$id" -- sh -c 'mkdir -p /src && cd /src && git init -q -b main' >/dev/null || fail "git init in the sandbox"
printf '%s' "$py" | ctl put "$id:/src/m.py" || fail "put m.py"
out=$(ctl git "$id" status /src) || fail "git status: exit $?"
[ "$out" = "## main
?? m.py" ] || fail "git status printed '$out'"
ctl git "$id" add /src m.py || fail "git add"
hash=$(ctl git "$id" commit /src -m "add m.py" --author "Ann <ann@example.org>") || fail "git commit"
head=$(ctl exec "$id" -- git -C /src rev-parse HEAD) || fail "rev-parse"
[ "$hash" = "$head" ] || fail "git commit answered $hash, HEAD is $head"
out=$(ctl --json git "$id" status /src) || fail "git status --json"
[ "$out" = '{"branch":"main","ahead":0,"behind":0,"files":[],"truncated":false}' ] || fail "clean status: $out"
python3 "$src/tests/integration/template_debian/lsp_client.py" file:///src/m.py "$py" \
  "$bin/sbxctl" lsp "$id" python --root /src || fail "LSP round trip with pylsp"
rc=0; ctl lsp "$id" ../../bin/sh </dev/null 2>/dev/null || rc=$?
[ "$rc" = 1 ] || fail "lsp ../../bin/sh: exit $rc, want 1"
echo "template_debian: ok ($(cat "$root/etc/debian_version"), $(ls "$root/usr/bin" | wc -l) programs in /usr/bin)"
