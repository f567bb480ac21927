#!/usr/bin/env bash
# The Python library installs as its README says (a venv on Debian's
# python3-grpcio, pip without build isolation, no package index) and
# imports from outside the source tree, at the daemon's version.
# Usage: install_test.sh LIBRARY_DIR VERSION
set -euo pipefail
library=$(realpath "$1")
version=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# (From a copy: a build writes build/ and *.egg-info beside its sources.)
cp -r "$library" "$work/src"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --quiet --no-build-isolation --no-index \
  "$work/src" 2>&1 | grep -v "^\[notice\]" || true
cd "$work"
got=$("$work/venv/bin/python" -c 'import delayd, sys; print(delayd.__version__); sys.exit(delayd.__file__.startswith(("'"$library"'", "'"$work/src"'")))')
if [ "$got" != "$version" ]; then
  echo "FAIL: installed delayd is $got, the daemon is $version" >&2
  exit 1
fi
echo "installed delayd $got"
