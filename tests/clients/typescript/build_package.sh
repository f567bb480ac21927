#!/usr/bin/env bash
# Builds the TypeScript library as its README says, in a copy under DEST (the
# build tree: the source tree stays clean): npm ci from the lockfile, then
# npm run build (stubs generated from PROTO, ES modules and CommonJS).
# Usage: build_package.sh SOURCE DEST PROTO
set -euo pipefail
src=$1 dest=$2 proto=$3
rm -rf "$dest"
mkdir -p "$dest"
(cd "$src" && tar cf - --exclude=node_modules --exclude=dist --exclude=src/gen \
  --exclude='*.tgz' .) | (cd "$dest" && tar xf -)
cd "$dest"
npm ci --no-audit --no-fund --loglevel=error
DELAYD_PROTO=$proto npm run build --silent
