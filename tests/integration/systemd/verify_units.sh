#!/bin/sh
# verify_units.sh UNIT_DIR INSTALLED_GEMMD BUILT_GEMMD [CONFIG_YAML [CLIENT_HEADER]]
#
# Checks the configured gemmd.service and gemmd.socket (from UNIT_DIR, the build's systemd/):
#  1. every directive the units must carry is there, with its value (the list below);
#  2. `systemd-analyze verify` has nothing to say about them. It exits 0 on unknown keys and
#     unparsable values (it only logs them), so any output at all is a failure;
#  3. `systemd-analyze security --offline` rates the service's exposure at 3.0 or better.
# verify insists that ExecStart's binary exists, so the copies it checks name BUILT_GEMMD in
# place of INSTALLED_GEMMD. CONFIG_YAML (config/gemmd.yaml) gives the drain timeout that
# TimeoutStopSec must exceed; it and CLIENT_HEADER (gemmclient.h) must name the socket path
# that gemmd.socket listens on. Exits 0 pass, 1 fail, 77 when systemd-analyze is missing.
set -u
unit_dir=$1 installed=$2 built=$3 config=${4:-} header=${5:-}

command -v systemd-analyze >/dev/null 2>&1 || { echo "SKIP: no systemd-analyze"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gemmd-units-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for unit in gemmd.service gemmd.socket; do
  [ -f "$unit_dir/$unit" ] || { echo "FAIL: $unit_dir/$unit was not configured"; exit 1; }
  # Replace the installed binary's path on the ExecStart line only.
  awk -v from="$installed" -v to="$built" '
    /^ExecStart=/ { i = index($0, from); if (i) $0 = substr($0, 1, i - 1) to substr($0, i + length(from)) }
    { print }' "$unit_dir/$unit" >"$tmp/$unit" || exit 1
done
# verify also insists on ExecReload's /bin/kill, which procps ships: a container may lack it,
# a host running systemd has it. Stand in /bin/true there, and say so.
if [ ! -x /bin/kill ]; then
  echo "note: no /bin/kill here (procps not installed): verify sees /bin/true in ExecReload"
  sed -i 's|^ExecReload=/bin/kill |ExecReload=/bin/true |' "$tmp/gemmd.service"
fi
grep -q "^ExecStart=$built " "$tmp/gemmd.service" ||
  bad "ExecStart does not start with $installed: $(grep '^ExecStart=' "$unit_dir/gemmd.service")"

# 1. The directives the units must carry, as exact lines (the unit files keep one setting a
#    line): notify and restart, the user and the GPU devices it may open, the sandbox, the
#    runtime and config directories, and the socket.
require() { # FILE LINE...
  file=$1; shift
  for line in "$@"; do
    grep -qxF -- "$line" "$tmp/$file" || bad "$file lacks the line: $line"
  done
}
require gemmd.service \
  'Type=notify' 'NotifyAccess=main' 'Restart=on-failure' \
  'User=gemmd' 'SupplementaryGroups=video render' 'DevicePolicy=closed' \
  'DeviceAllow=char-nvidia-frontend rw' 'DeviceAllow=char-nvidia-uvm rw' \
  'DeviceAllow=char-nvidia-caps rw' 'DeviceAllow=/dev/nvidiactl rw' \
  'DeviceAllow=/dev/nvidia-uvm rw' 'DeviceAllow=/dev/nvidia-uvm-tools rw' \
  'DeviceAllow=/dev/nvidia-caps/nvidia-cap1 r' 'DeviceAllow=/dev/nvidia-caps/nvidia-cap2 r' \
  'ProtectSystem=strict' 'ProtectHome=yes' 'NoNewPrivileges=yes' 'PrivateTmp=yes' \
  'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' 'SystemCallFilter=@system-service' \
  'UMask=0007' 'CapabilityBoundingSet=' 'RuntimeDirectory=gemmd' 'RuntimeDirectoryMode=0750' \
  'ConfigurationDirectory=gemmd' 'Wants=gemmd.socket'
require gemmd.socket \
  'ListenStream=/run/gemmd/gemmd.sock' 'SocketMode=0660' 'SocketGroup=gemmd' \
  'Service=gemmd.service' 'WantedBy=sockets.target'
grep -qxF 'ExecReload=/bin/kill -HUP $MAINPID' "$unit_dir/gemmd.service" ||
  bad "gemmd.service lacks the line: ExecReload=/bin/kill -HUP \$MAINPID"
grep -q '^After=.*gemmd\.socket' "$tmp/gemmd.service" || bad "gemmd.service is not After=gemmd.socket"
grep -q "^ExecStart=$built --config /.*/gemmd/gemmd\.yaml\$" "$tmp/gemmd.service" ||
  bad "ExecStart does not pass --config .../gemmd/gemmd.yaml"
grep -q '^LimitMEMLOCK=' "$tmp/gemmd.service" || bad "gemmd.service sets no LimitMEMLOCK"

# WatchdogSec must be set, and TimeoutStopSec must leave room for the drain.
watchdog=$(sed -n 's/^WatchdogSec=\([0-9]*\)s$/\1/p' "$tmp/gemmd.service")
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s$/\1/p' "$tmp/gemmd.service")
[ -n "$watchdog" ] && [ "$watchdog" -ge 2 ] || bad "WatchdogSec= missing or under 2s"
[ -n "$stop" ] || bad "TimeoutStopSec= missing (in whole seconds)"
# timeouts.drain_ms of the shipped config (the first "drain_ms: N" line).
drain_ms=
if [ -n "$config" ] && [ -f "$config" ]; then
  drain_ms=$(sed -n 's/^[[:space:]]*drain_ms:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$config" | head -n 1)
fi
if [ -z "$drain_ms" ]; then
  echo "note: no timeouts.drain_ms in '$config': TimeoutStopSec not compared with it"
elif [ -n "$stop" ] && [ $((stop * 1000)) -le "$drain_ms" ]; then
  bad "TimeoutStopSec=${stop}s is not above timeouts.drain_ms ($drain_ms ms)"
else
  echo "ok: TimeoutStopSec=${stop}s is above timeouts.drain_ms ($drain_ms ms)"
fi

# One socket path everywhere: the socket unit, the config's first listen address (used when
# the service runs without the socket unit) and the client's default address.
socket_path=$(sed -n 's/^ListenStream=//p' "$tmp/gemmd.socket")
if [ -n "$config" ] && [ -f "$config" ]; then
  first=$(sed -n 's/^[[:space:]]*-[[:space:]]*"\{0,1\}unix:\([^"[:space:]]*\).*/\1/p' "$config" | head -n 1)
  [ "$first" = "$socket_path" ] ||
    bad "config's first unix listen address is '$first', gemmd.socket listens on '$socket_path'"
fi
if [ -n "$header" ] && [ -f "$header" ]; then
  grep -q "^#define GC_DEFAULT_ADDRESS \"unix:$socket_path\"" "$header" ||
    bad "GC_DEFAULT_ADDRESS in $header is not \"unix:$socket_path\""
fi

# 2. systemd-analyze verify: silence is success.
( cd "$tmp" && systemd-analyze verify --man=no ./gemmd.socket ./gemmd.service ) >"$tmp/verify.out" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ -s "$tmp/verify.out" ]; then
  bad "systemd-analyze verify (exit $rc) reported:"
  sed 's/^/  /' "$tmp/verify.out"
else
  echo "ok: systemd-analyze verify is silent"
fi

# 3. Exposure (0 = locked down, 10 = none): 3.0 or better. --threshold exists from systemd 250.
if systemd-analyze security --help 2>&1 | grep -q -- '--threshold'; then
  ( cd "$tmp" && systemd-analyze security --offline=yes --threshold=30 --no-pager ./gemmd.service ) \
    >"$tmp/security.out" 2>&1
  rc=$?
  score=$(grep 'Overall exposure level' "$tmp/security.out")
  if [ $rc -ne 0 ]; then
    bad "systemd-analyze security: exposure above 3.0 (exit $rc): $score"
    grep '✗' "$tmp/security.out" | sed 's/  */ /g; s/^/  /'
  else
    echo "ok: $score"
  fi
else
  echo "note: this systemd-analyze has no security --threshold; exposure not checked"
fi

[ $fail -eq 0 ] && echo "PASS" || echo "FAILED"
exit $fail
