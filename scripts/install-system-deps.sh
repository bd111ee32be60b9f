#!/usr/bin/env bash
# The system programs the test suite talks to for real: an OpenSSH server and client
# (the SSH tiers start sshd on loopback ports), sudo (the `become` tests), patch(1)
# and git (the diff edit is compared with `patch -p1 --dry-run` on diffs `git diff` made),
# and podman with runc, debootstrap and uidmap (the container tiers: containers of an image
# debootstrap builds, since no registry image can be pulled; crun refuses this machine's cgroups;
# catatonit: the pause process of the pods `podman kube play` makes),
# and Debian's chromium (the review page is rendered headless; no test tool may download a browser).
# Installs what is missing with apt-get as root; as another user, stops with one line
# naming what to install. Never leaves a tier to be skipped for want of them.
set -euo pipefail

need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v sudo >/dev/null 2>&1 || need+=(sudo)
command -v patch >/dev/null 2>&1 || need+=(patch)
command -v git >/dev/null 2>&1 || need+=(git)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v newuidmap >/dev/null 2>&1 || need+=(uidmap)
command -v catatonit >/dev/null 2>&1 || [ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
[ -x /usr/bin/chromium ] || need+=(chromium)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "make test needs ${need[*]}: install them (e.g. 'sudo apt-get install -y ${need[*]}') and run it again" >&2
  exit 1
fi
echo "make test: installing ${need[*]} with apt-get (one-off, about 30 s; with podman about 1 min)" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "make test: apt-get could not install ${need[*]} (output above)" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
