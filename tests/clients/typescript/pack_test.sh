#!/usr/bin/env bash
# `npm pack` makes the package, and a project that installs the tarball uses
# it three ways: require() (CommonJS), import (ES modules), and TypeScript
# type-checking against its declarations. Its version is the project's.
# Usage: pack_test.sh BUILT_PACKAGE_DIR VERSION
set -euo pipefail
pkg=$1 version=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$pkg"
# (Built already by build_package.sh: --ignore-scripts packs what is built,
# leaving it in place for the tests running beside this one.)
tarball=$(npm pack --ignore-scripts --silent --pack-destination "$work" | tail -1)
[ "$tarball" = "delayd-$version.tgz" ] || { echo "packed $tarball, not delayd-$version.tgz" >&2; exit 1; }
# Only what a user needs: the compiled modules, their types, the README.
files=$(tar tzf "$work/$tarball")
grep -qx 'package/dist/cjs/index.js' <<<"$files"
grep -qx 'package/dist/esm/index.d.ts' <<<"$files"
if grep -qE '^package/(src|node_modules)/' <<<"$files"; then
  echo "the package holds sources or node_modules" >&2; exit 1
fi
mkdir "$work/app"
cd "$work/app"
printf '{"name":"app","version":"1.0.0","private":true}\n' >package.json
npm install --no-audit --no-fund --loglevel=error "$work/$tarball"
node -e "const d = require('delayd');
  if (typeof d.Worker !== 'function' || d.VERSION !== '$version') process.exit(1);
  if (!(new d.NotFoundError('x') instanceof d.DelaydError)) process.exit(1);"
node --input-type=module -e "import {Client, VERSION} from 'delayd';
  if (typeof Client !== 'function' || VERSION !== '$version') process.exit(1);"
cat >check.ts <<'TS'
import {AbortedError, Client, Worker, type Event} from 'delayd';
const client = new Client({endpoints: ['127.0.0.1:1']});
const handler = async (e: Event): Promise<void> => { void e.id.toString(); };
const w: Worker = new Worker('shop', handler, {concurrency: 2, client});
async function use(): Promise<bigint> {
  try {
    return (await client.setTimer('k', 'p', {delay: 1000, expectedVersion: 1n})).version;
  } catch (e) {
    if (e instanceof AbortedError) return 0n;
    throw e;
  }
}
void use; void w;
TS
# (expectedVersion is not a set's option: the checker must refuse it.)
if "$pkg/node_modules/.bin/tsc" --noEmit --strict --module nodenext \
    --moduleResolution nodenext --target es2022 --types node \
    --typeRoots "$pkg/node_modules/@types" check.ts >tsc.out 2>&1; then
  echo "tsc accepted an option setTimer does not take" >&2; exit 1
fi
grep -q "expectedVersion" tsc.out || { cat tsc.out >&2; exit 1; }
sed -i 's/, expectedVersion: 1n//' check.ts
"$pkg/node_modules/.bin/tsc" --noEmit --strict --module nodenext \
  --moduleResolution nodenext --target es2022 --types node \
  --typeRoots "$pkg/node_modules/@types" check.ts
echo "packed, installed, required, imported and type-checked $tarball"
