// dist/cjs holds CommonJS modules inside a "type": "module" package: a
// package.json of its own says so to Node.js.
import {writeFileSync} from 'node:fs';
writeFileSync(new URL('../dist/cjs/package.json', import.meta.url),
              JSON.stringify({type: 'commonjs'}) + '\n');
