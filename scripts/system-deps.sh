#!/usr/bin/env bash
# Installs the two system packages Crucible uses when they are missing and we may: bubblewrap (the
# process sandbox) and Debian's chromium (browser tests). Never fatal: the sandbox reports the
# isolation it really has, and browser tests skip with a reason when no chromium can be had.
set -u
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)  # only to check docker-compose.yml
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[crucible] installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || echo "[crucible] could not install ${missing[*]}; continuing"
else
  echo "[crucible] missing ${missing[*]} (not root or no apt-get): install them for full isolation / browser tests"
fi
exit 0
