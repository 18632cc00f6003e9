#!/bin/sh
# check_sysusers_tmpfiles.sh SYSTEMD_SOURCE_DIR
#
# Applies systemd/sysusers.conf and systemd/tmpfiles.conf to an empty root directory with
# systemd-sysusers --root and systemd-tmpfiles --root, as a package install and a boot would,
# and checks the result: a system user and group gemmd, gemmd a member of video and render
# (which the unit's SupplementaryGroups= needs to exist), and /run/gemmd owned by gemmd with
# mode 0750. Any complaint from either tool fails the test, also when sysusers.conf is applied
# as the package installs it, gemmd.conf beside the system's own sysusers.d files (systemd's
# basic.conf declares video: declaring it again drew "Conflict with earlier configuration for
# group 'video'"). 77 when the tools are missing.
set -u
src=$1
for tool in systemd-sysusers systemd-tmpfiles; do
  command -v $tool >/dev/null 2>&1 || { echo "SKIP: no $tool"; exit 77; }
done
# Creating /run/gemmd owned by gemmd takes root (chown), even inside a --root tree.
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to chown inside the test root"; exit 77; }
root=$(mktemp -d "${TMPDIR:-/tmp}/gemmd-sysroot-XXXXXX") || exit 1
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# Both tools report what they create on stderr; anything else is a complaint.
complaints() { grep -v -e '^Creating group ' -e '^Creating user ' "$1"; }

systemd-sysusers --root="$root" "$src/sysusers.conf" >"$root/sysusers.out" 2>&1 ||
  bad "systemd-sysusers failed"
if complaints "$root/sysusers.out" >/dev/null; then
  bad "systemd-sysusers complained:"; complaints "$root/sysusers.out" | sed 's/^/  /'
fi
# and beside the system's files, as a package's postinst runs it (no argument: every file)
if [ -d /usr/lib/sysusers.d ]; then
  both=$(mktemp -d "${TMPDIR:-/tmp}/gemmd-sysroot-XXXXXX") || exit 1
  mkdir -p "$both/etc" "$both/usr/lib/sysusers.d"
  cp /usr/lib/sysusers.d/*.conf "$both/usr/lib/sysusers.d/" 2>/dev/null
  cp "$src/sysusers.conf" "$both/usr/lib/sysusers.d/gemmd.conf"
  systemd-sysusers --root="$both" >"$both/sysusers.out" 2>&1 || bad "systemd-sysusers (all files) failed"
  if grep -q -e 'gemmd.conf' -e 'Conflict' "$both/sysusers.out"; then
    bad "systemd-sysusers with the system's files complained:"
    grep -e 'gemmd.conf' -e 'Conflict' "$both/sysusers.out" | sed 's/^/  /'
  fi
  for group in video render; do
    grep -q "^$group:.*[:,]gemmd\(,\|\$\)" "$both/etc/group" || bad "beside the system's files, gemmd is not in $group"
  done
  rm -rf "$both"
fi

user=$(grep '^gemmd:' "$root/etc/passwd")
[ -n "$user" ] || bad "no user gemmd in the root's /etc/passwd"
uid=$(echo "$user" | cut -d: -f3)
gid=$(grep '^gemmd:' "$root/etc/group" | cut -d: -f3)
[ -n "$gid" ] || bad "no group gemmd"
[ "$(echo "$user" | cut -d: -f4)" = "$gid" ] || bad "user gemmd's primary group is not gemmd"
[ -n "$uid" ] && [ "$uid" -lt 1000 ] || bad "gemmd is not a system user (uid $uid)"
case $(echo "$user" | cut -d: -f7) in
  */nologin|*/false) ;;
  *) bad "user gemmd has a login shell: $user" ;;
esac
for group in video render; do
  grep -q "^$group:.*[:,]gemmd\(,\|\$\)" "$root/etc/group" || bad "gemmd is not in group $group"
done

systemd-tmpfiles --root="$root" --create "$src/tmpfiles.conf" >"$root/tmpfiles.out" 2>&1 ||
  bad "systemd-tmpfiles --create failed"
if [ -s "$root/tmpfiles.out" ]; then
  bad "systemd-tmpfiles complained:"; sed 's/^/  /' "$root/tmpfiles.out"
fi
if [ -d "$root/run/gemmd" ]; then
  got=$(stat -c '%a %u %g' "$root/run/gemmd")
  [ "$got" = "750 $uid $gid" ] || bad "/run/gemmd is '$got' (mode uid gid), expected '750 $uid $gid'"
else
  bad "systemd-tmpfiles did not create /run/gemmd"
fi

[ $fail -eq 0 ] && echo "PASS: user, group and /run/gemmd as the units expect" || echo "FAILED"
exit $fail
