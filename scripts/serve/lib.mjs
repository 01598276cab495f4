// Helpers shared by rewind serve's node tests and load generator: start a server on an ephemeral
// port and wait for /health, run `rewind generate --json` for the reference answers, parse flags.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const here = dirname(fileURLToPath(import.meta.url));

// Exits 77 (ctest's skip code) unless the pinned openai client is installed (npm ci here).
export async function loadOpenAI() {
  if (!existsSync(join(here, 'node_modules', 'openai'))) {
    console.log(`SKIP: ${join(here, 'node_modules')} has no openai client (run: npm ci --prefix ${here})`);
    process.exit(77);
  }
  return (await import('openai')).default;
}

// Ajv (JSON Schema 2020-12, with formats), from scripts/json-schema's pinned install; exits 77
// (skipped) without it.
export async function loadAjv() {
  const modules = join(here, '..', 'json-schema', 'node_modules');
  if (!existsSync(join(modules, 'ajv'))) {
    console.log(`SKIP: ${modules} has no ajv (run: npm ci --prefix ${join(here, '..', 'json-schema')})`);
    process.exit(77);
  }
  const { default: Ajv2020 } = await import(pathToFileURL(join(modules, 'ajv', 'dist', '2020.js')).href);
  const { default: addFormats } = await import(pathToFileURL(join(modules, 'ajv-formats', 'dist', 'index.js')).href);
  return addFormats(new Ajv2020({ strict: false }));
}

// --name value pairs into an object.
export function parseArgs(argv, defaults = {}) {
  const out = { ...defaults };
  for (let i = 0; i < argv.length; ++i) {
    if (!argv[i].startsWith('--')) throw new Error(`unexpected argument ${argv[i]}`);
    const key = argv[i].slice(2);
    const next = argv[i + 1];
    if (next === undefined || next.startsWith('--')) out[key] = true;
    else { out[key] = next; ++i; }
  }
  return out;
}

// Starts `rewind serve` on 127.0.0.1 with port 0 and resolves once /health says ok:
// { proc, port, url, stderr(), exited (a promise of the exit code) }.
export async function startServer(rewind, args, { timeoutMs = 30000 } = {}) {
  const proc = spawn(rewind, ['serve', '--host', '127.0.0.1', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  let port = 0;
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(signal ? `signal ${signal}` : code)));
  proc.stderr.on('data', (d) => {
    err += d.toString();
    const m = err.match(/listening on http:\/\/[^:]+:(\d+)/);
    if (m && !port) port = Number(m[1]);
  });
  const t0 = Date.now();
  while (true) {
    if (Date.now() - t0 > timeoutMs) { proc.kill('SIGKILL'); throw new Error(`server did not become healthy:\n${err}`); }
    if (proc.exitCode !== null) throw new Error(`server exited ${proc.exitCode}:\n${err}`);
    if (port) {
      try {
        const r = await fetch(`http://127.0.0.1:${port}/health`);
        if (r.status === 200) break;
      } catch { /* not yet */ }
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { proc, port, url: `http://127.0.0.1:${port}`, stderr: () => err, exited };
}

// `rewind generate --json` with these flags: { text, ids, stop }.
export function generate(rewind, model, flags) {
  // The server's request caches are F32 (the library's default); the CLI's default is F16.
  const out = execFileSync(rewind, ['generate', '-m', model, '--json', ...flags],
                           { encoding: 'utf8', maxBuffer: 1 << 26 });
  const j = JSON.parse(out);
  return { text: j.generated_text, ids: j.generated_ids, stop: j.stop_reason };
}

// The text OpenAI returns for a stop list: cut before the first stop string.
export function cutAtStop(text, stops) {
  let cut = text.length;
  for (const s of stops ?? []) { const i = text.indexOf(s); if (i >= 0) cut = Math.min(cut, i); }
  return text.slice(0, cut);
}

// The settings of a request as `rewind generate` flags (greedy unless temperature is given).
export function generateFlags(req) {
  const f = ['-n', String(req.max_tokens), '--temp', String(req.temperature ?? 1)];
  if (req.top_p !== undefined) f.push('--top-p', String(req.top_p));
  if (req.seed !== undefined) f.push('--seed', String(req.seed));
  if (req.top_k !== undefined) f.push('--top-k', String(req.top_k));
  if (req.min_p !== undefined) f.push('--min-p', String(req.min_p));
  if (req.repeat_penalty !== undefined) f.push('--repeat-penalty', String(req.repeat_penalty));
  if (req.repeat_last_n !== undefined) f.push('--repeat-last-n', String(req.repeat_last_n));
  return f;
}

export function percentile(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

export function rewindPath() {
  const p = join(here, '..', '..', 'build', 'bin', 'rewind');
  return existsSync(p) ? p : 'rewind';
}

export { execFileSync };
