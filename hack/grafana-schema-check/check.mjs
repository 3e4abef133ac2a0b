// Type-checks Grafana dashboard JSON files against @grafana/schema with tsc (run by check.sh).
//   node check.mjs NODE_MODULES FILE.json...     exit 1 and print file:line: error for each fault
//   node check.mjs NODE_MODULES --self-test      a good dashboard passes, broken copies fail
// Each file becomes a .ts file whose only statement assigns the JSON text, verbatim, to a variable
// typed CheckedDashboard (dashboard-types.ts): TypeScript checks excess properties on object
// literals only, so an imported .json or a parsed value would let unknown fields through. Verbatim
// text keeps tsc's line numbers one-to-one with the JSON file's.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const HEADER = 2; // lines of the .ts file above the JSON's first line

// Returns tsc's diagnostics with locations rewritten to the JSON files ('' when all pass).
function check(nodeModules, files) {
  const work = mkdtempSync(join(tmpdir(), 'grafana-schema-check-'));
  try {
    symlinkSync(resolve(nodeModules), join(work, 'node_modules'));
    for (const name of ['dashboard-types.ts', 'tsconfig.json']) {
      copyFileSync(join(HERE, name), join(work, name));
    }
    const sources = new Map();
    files.forEach((file, i) => {
      const text = readFileSync(file, 'utf8');
      JSON.parse(text); // a syntax error names the file before tsc sees it
      const ts = `board${i}.ts`;
      const assign = `export const board${i}: CheckedDashboard = `;
      sources.set(ts, { file: shown(file), indent: assign.length });
      writeFileSync(
        join(work, ts),
        `import type { CheckedDashboard } from './dashboard-types';\n` +
          `// ${file}\n` +
          `${assign}${text.trimEnd()};\n`,
      );
    });
    const tsc = join(nodeModules, 'typescript', 'bin', 'tsc');
    try {
      execFileSync(process.execPath, [tsc, '-p', '.', '--pretty', 'false'], { cwd: work, encoding: 'utf8' });
      return '';
    } catch (err) {
      if (err.stdout === undefined) throw err;
      const located = err.stdout.replace(/^(board\d+\.ts)\((\d+),(\d+)\)/gm, (m, ts, line, col) => {
        const src = sources.get(ts);
        if (src === undefined || line <= HEADER) return m;
        return `${src.file}:${line - HEADER}:${line - HEADER === 1 ? col - src.indent : col}`;
      });
      return located || err.stderr || 'tsc failed without diagnostics';
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

// Each broken copy of a good dashboard, and the text its diagnostic must hold.
const BREAKAGES = {
  'unknown top-level field': [(d) => (d.refreshEvery = '30s'), "'\"refreshEvery\"' does not exist"],
  'unknown panel option': [
    (d) => (panel(d, 'timeseries').options.legend.sortOrder = 'asc'),
    "'\"sortOrder\"' does not exist",
  ],
  'unknown custom field config': [
    (d) => (panel(d, 'timeseries').fieldConfig.defaults.custom.fillOpacityPct = 60),
    "'\"fillOpacityPct\"' does not exist",
  ],
  'wrong type: refresh as a number': [(d) => (d.refresh = 30), "Type 'number' is not assignable to type 'string'"],
  'wrong type: gridPos as strings': [
    (d) => (panel(d, 'timeseries').gridPos.h = '8'),
    "Type 'string' is not assignable to type 'number'",
  ],
  'value outside an enum': [
    (d) => (panel(d, 'timeseries').options.legend.displayMode = 'tabel'),
    'Type \'"tabel"\' is not assignable',
  ],
};

// A path as the user would type it: relative inside the current folder, else absolute.
function shown(file) {
  const rel = relative(process.cwd(), file);
  return rel.startsWith('..') ? resolve(file) : rel;
}

function panel(board, type) {
  return board.panels.find((p) => p.type === type);
}

function selfTest(nodeModules) {
  const good = join(HERE, '..', '..', 'charts', 'kubecua', 'dashboards', 'kubecua-fleet.json');
  const dir = mkdtempSync(join(tmpdir(), 'grafana-schema-self-test-'));
  const cases = Object.entries(BREAKAGES).map(([what, [breakIt, expected]], i) => {
    const board = JSON.parse(readFileSync(good, 'utf8'));
    breakIt(board);
    const file = join(dir, `broken-${i}.json`);
    writeFileSync(file, JSON.stringify(board, null, 2) + '\n');
    return { what, file: shown(file), expected };
  });
  let out;
  try {
    out = check(nodeModules, [good, ...cases.map((c) => c.file)]); // one tsc run for all
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const lines = (file) => out.split('\n').filter((l) => l.startsWith(`${file}:`)).join('\n');
  let failed = 0;
  const goodOut = lines(shown(good));
  if (goodOut) {
    console.error(`self-test: the shipped ${basename(good)} fails:\n${goodOut}`);
    failed++;
  }
  for (const { what, file, expected } of cases) {
    if (!lines(file).includes(expected)) {
      console.error(`self-test: ${what}: expected a diagnostic with ${expected}, got:\n${lines(file) || '(passed)'}`);
      failed++;
    }
  }
  if (failed) return 1;
  console.log(`self-test: the shipped dashboard passes; ${cases.length} broken copies fail`);
  return 0;
}

const [nodeModules, ...args] = process.argv.slice(2);
if (args[0] === '--self-test') {
  process.exit(selfTest(nodeModules));
}
const out = check(nodeModules, args);
if (out) {
  process.stderr.write(out);
  process.exit(1);
}
console.log(`${args.length} dashboards match @grafana/schema's types`);
