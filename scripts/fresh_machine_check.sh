#!/usr/bin/env bash
# Proves the README's two commands on a fresh Debian 12 (bookworm) machine: builds a minimal root
# with debootstrap, copies a clean clone of HEAD into it and runs there, as root and with nothing
# else installed, exactly what a newcomer runs:
#
#   1. make test                      (scripts/setup.sh installs the packages, builds, runs CTest)
#   2. make run, in the background, then the curl command it prints, against it
#
# Prints each step's time, ends with "fresh_machine_check: PASS" or "... FAIL: <why>" and exits
# non-zero on FAIL. Every step is bounded in time; on exit the mounts are undone, the processes
# started in the root are killed and the root is removed (unless SPINDLE_FRESH_KEEP=1).
#
# The root reaches the package registries the way this host does: the host's extra CA
# certificates (/usr/local/share/ca-certificates) and npm's cafile and registry settings are
# carried in, so `npm ci` (the OpenAI Node client test) works there when it works here. A run in
# which that test skips is a FAIL.
#
# Needs root and about 4 GiB of disk. Environment:
#   SPINDLE_FRESH_ROOT=DIR     where to build the root (default: a new folder under /var/tmp)
#   SPINDLE_FRESH_KEEP=1       keep the root afterwards (for a look inside)
#   SPINDLE_FRESH_MIRROR=URL   Debian mirror (default: http://deb.debian.org/debian)
#   SPINDLE_FRESH_LOG=FILE     also write this script's log to FILE
#   SPINDLE_FRESH_MAKE_TEST_S=N  time limit of `make test` in seconds (default 3600; a shared, busy host needs more)
#   SPINDLE_FRESH_LOGS=DIR     where the full logs of `make test` and `make run` inside the root are
#                              copied before the root is removed (default: /var/tmp/spindle-fresh-logs)
set -uo pipefail

REPO="${SPINDLE_FRESH_REPO:-$(cd "$(dirname "$0")/.." && pwd)}"  # the clone whose HEAD is checked
MIRROR="${SPINDLE_FRESH_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
ROOT="${SPINDLE_FRESH_ROOT:-}"
KEEP="${SPINDLE_FRESH_KEEP:-0}"
LOGS="${SPINDLE_FRESH_LOGS:-/var/tmp/spindle-fresh-logs}"
PORT=8080

# Time limits per step, seconds.
T_DEBOOTSTRAP=1200
T_MAKE_TEST="${SPINDLE_FRESH_MAKE_TEST_S:-3600}"  # a from-scratch build and the suite; more on a loaded host
T_READY=600      # make run: until the server prints its curl command
T_CURL=120

if [[ -n "${SPINDLE_FRESH_LOG:-}" ]]; then
  exec > >(tee "$SPINDLE_FRESH_LOG") 2>&1
fi

STARTED=$(date +%s)
RUN_PID=""
MOUNTED=()

say() { echo "fresh_machine_check: $*"; }
fail() {
  say "FAIL: $*"
  exit 1
}
elapsed() { echo $(($(date +%s) - $1)); }

# Kills every process whose root is $ROOT (make run and whatever it started), then unmounts.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$RUN_PID" ]]; then kill -TERM -- "-$RUN_PID" 2>/dev/null; fi
  if [[ -n "$ROOT" && -d "$ROOT" ]]; then
    local real
    real="$(readlink -f "$ROOT")"
    for sig in TERM KILL; do
      for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/root" 2>/dev/null)" == "$real" ]] && kill "-$sig" "${p#/proc/}" 2>/dev/null
      done
      sleep 1
    done
    mkdir -p "$LOGS"
    for f in make_test.log make_run.log; do
      [[ -f "$ROOT/root/$f" ]] && cp "$ROOT/root/$f" "$LOGS/$f"
    done
    local i
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
      umount "${MOUNTED[$i]}" 2>/dev/null || umount -l "${MOUNTED[$i]}" 2>/dev/null
    done
    if [[ "$KEEP" == "1" ]]; then
      say "kept the root at $ROOT"
    else
      rm -rf --one-file-system "$ROOT"
    fi
  fi
  [[ -d "$LOGS" ]] && say "full logs of the root's commands in $LOGS"
  say "total $(elapsed "$STARTED") s"
  exit "$rc"
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

[[ $(id -u) -eq 0 ]] || fail "run as root (debootstrap, chroot and mounts need it)"
command -v git >/dev/null || fail "git is needed to clone HEAD"
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on this host"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null ||
    fail "could not install debootstrap"
fi

if [[ -z "$ROOT" ]]; then ROOT="$(mktemp -d /var/tmp/spindle-fresh.XXXXXX)"; fi
mkdir -p "$ROOT"
HEAD_SHA="$(git -C "$REPO" rev-parse HEAD)"  # fixed now: commits made while this runs are not taken
say "root $ROOT, HEAD ${HEAD_SHA:0:12}, host $(uname -n), $(nproc) cores, $(date -u +%FT%TZ)"

# Runs a command inside the root as a fresh login would: root's home, a plain PATH, no variables
# of this session (only the CA bundle variables that make the host's TLS work, see above).
in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${NODE_EXTRA_CA_CERTS:+NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt} \
    /bin/bash -c "$1"
}

# --- 1. the root --------------------------------------------------------------------------------
t=$(date +%s)
say "step debootstrap: minbase $SUITE from $MIRROR"
timeout "$T_DEBOOTSTRAP" debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
  { tail -20 "$ROOT.debootstrap.log"; rm -f "$ROOT.debootstrap.log"; fail "debootstrap failed or timed out"; }
rm -f "$ROOT.debootstrap.log"
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${MIRROR%/debian}/debian-security $SUITE-security main
EOF
for m in proc sys dev dev/pts; do
  mkdir -p "$ROOT/$m"
  case $m in
    proc) mount -t proc proc "$ROOT/proc" ;;
    sys) mount -t sysfs sys "$ROOT/sys" ;;
    dev) mount --bind /dev "$ROOT/dev" ;;
    dev/pts) mount --bind /dev/pts "$ROOT/dev/pts" ;;
  esac || fail "mount $m"
  MOUNTED+=("$ROOT/$m")
done
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null
# The host's extra CA certificates (picked up when ca-certificates is installed in the root) and
# npm's settings for reaching its registry.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi
if command -v npm >/dev/null; then
  {
    cafile="$(npm config get cafile 2>/dev/null)"
    [[ -n "$cafile" && "$cafile" != "null" && "$cafile" != "undefined" ]] &&
      echo "cafile=/etc/ssl/certs/ca-certificates.crt"
    registry="$(npm config get registry 2>/dev/null)"
    [[ -n "$registry" ]] && echo "registry=$registry"
  } >"$ROOT/root/.npmrc"
fi
say "step debootstrap: done in $(elapsed "$t") s"

# --- 2. a clean clone of HEAD -------------------------------------------------------------------
git clone -q --no-hardlinks --no-checkout "$REPO" "$ROOT/root/spindle" || fail "git clone"
git -C "$ROOT/root/spindle" checkout -q "$HEAD_SHA" || fail "git checkout $HEAD_SHA"

# What the README tells a newcomer on a bare machine to install first (git to clone, make to run
# the two commands); everything else is scripts/setup.sh's job.
in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends git make >/dev/null" ||
  fail "could not install git and make in the root"

# --- 3. make test -------------------------------------------------------------------------------
t=$(date +%s)
say "step make test: start"
in_root "cd /root/spindle && timeout $T_MAKE_TEST make test" 2>&1 | tee "$ROOT/root/make_test.log" |
  grep -E --line-buffered '^setup:|tests passed|tests failed|Total Test time|\*\*\*Failed|\*\*\*Timeout|Not Run'
rc=${PIPESTATUS[0]}
say "step make test: exit $rc in $(elapsed "$t") s"
((rc == 0)) || { tail -40 "$ROOT/root/make_test.log"; fail "make test exited $rc"; }
# The OpenAI Node client test must have run and passed (ctest says "***Skipped" when npm ci
# could not install its packages).
node_line="$(grep -m1 -E 'Test +#[0-9]+: ServerApiTest.OfficialOpenAiNodeClient' "$ROOT/root/make_test.log")"
echo "$node_line"
[[ "$node_line" == *Passed* ]] || fail "the OpenAI Node client test did not pass: ${node_line:-not in the CTest output}"

# --- 4. make run, then the printed curl command -------------------------------------------------
in_root "apt-get install -y -qq --no-install-recommends curl >/dev/null 2>&1" ||
  fail "could not install curl (the README's client) in the root"
t=$(date +%s)
say "step make run: start"
setsid chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/bash -c "cd /root/spindle && exec make run" >"$ROOT/root/make_run.log" 2>&1 &
RUN_PID=$!
curl_cmd=""
deadline=$(($(date +%s) + T_READY))
while (($(date +%s) < deadline)); do
  curl_cmd="$(grep -m1 -E '^\s*curl http' "$ROOT/root/make_run.log" | sed 's/^ *//')"
  [[ -n "$curl_cmd" ]] && break
  kill -0 "$RUN_PID" 2>/dev/null || { tail -30 "$ROOT/root/make_run.log"; fail "make run exited before it was ready"; }
  sleep 1
done
[[ -n "$curl_cmd" ]] || { tail -30 "$ROOT/root/make_run.log"; fail "make run printed no curl command in $T_READY s"; }
say "step make run: ready in $(elapsed "$t") s"
say "step curl: $curl_cmd"
t=$(date +%s)
answer="$(in_root "timeout $T_CURL $curl_cmd -sS --fail-with-body")"
rc=$?
echo "$answer"
say "step curl: exit $rc in $(elapsed "$t") s"
((rc == 0)) || fail "the curl command failed (exit $rc)"
echo "$answer" | grep -q '"text"' || fail "the answer has no completion text"
echo "$answer" | grep -q '"completion_tokens"' || fail "the answer has no usage"

say "PASS"
