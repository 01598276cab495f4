// Helpers of the cluster tests: a cluster of `rewind serve` replicas behind a balancer started with
// up.sh on a free loopback port (its own state directory) and stopped with down.sh, reference
// answers from `rewind generate`, and the replica that made a response.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export { loadOpenAI, parseArgs, percentile, rewindPath } from '../serve/lib.mjs';

export const clusterDir = dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `up.sh --replicas n` on a random free port (three tries) with these serve arguments:
// { port, url, dir, balancer, replicas: [{ pid, port }], balancerPid, down(), env }. Skips (exit
// 77) when the balancer is not installed.
export async function startCluster({ rewind, balancer = 'haproxy', replicas = 3, serveArgs }) {
  try { await run('sh', ['-c', `PATH=$PATH:/usr/sbin:/sbin; command -v ${balancer}`]); } catch {
    console.log(`SKIP: ${balancer} is not installed`);
    process.exit(77);
  }
  const dir = mkdtempSync(join(tmpdir(), 'rewind-cluster-test-'));
  const env = { ...process.env, REWIND: rewind, REWIND_CLUSTER_DIR: join(dir, 'state') };
  let lastError;
  for (let attempt = 0; attempt < 3; ++attempt) {
    const port = 20000 + Math.floor(Math.random() * 30000);
    try {
      const { stdout } = await run(join(clusterDir, 'up.sh'), ['--replicas', String(replicas), '--port', String(port),
        '--balancer', balancer, '--', ...serveArgs], { env, timeout: 120000 });
      const reps = [];
      let balancerPid = 0;
      for (const line of stdout.trim().split('\n')) {
        const w = line.split(' ');
        if (w[0] === 'replica') reps.push({ pid: Number(w[1]), port: Number(w[2]) });
        if (w[0] === 'balancer') balancerPid = Number(w[1]);
      }
      if (reps.length !== replicas || !balancerPid) throw new Error(`up.sh printed:\n${stdout}`);
      const c = { port, url: `http://127.0.0.1:${port}`, dir: env.REWIND_CLUSTER_DIR, balancer, replicas: reps,
        balancerPid, env };
      c.log = () => { try { return readFileSync(join(c.dir, 'balancer.log'), 'utf8'); } catch { return ''; } };
      // Should this process die first (a ctest timeout kills it), a watchdog outside it stops the
      // cluster: it checks once a second, for at most 10 minutes.
      const watchdog = spawn('bash', ['-c', 'for ((i = 0; i < 600; ++i)); do kill -0 "$1" 2>/dev/null || break; sleep 1; done; ' +
        '"$2" "$3"; rm -rf "$4"', 'watchdog', String(process.pid), join(clusterDir, 'down.sh'), String(port), dir],
      { env, detached: true, stdio: 'ignore' });
      watchdog.unref();
      c.down = async () => {
        await run(join(clusterDir, 'down.sh'), [String(port)], { env, timeout: 90000 }).catch((e) => console.log(`down.sh: ${e}`));
        try { process.kill(watchdog.pid, 'SIGKILL'); } catch { /* gone */ }
        rmSync(dir, { recursive: true, force: true });
      };
      return c;
    } catch (e) {
      lastError = e;
      if (!String(e.stderr ?? '').includes('in use')) break;
    }
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error(`up.sh failed: ${lastError?.stderr ?? lastError}`);
}

// The text `rewind generate` makes of a prompt (the chat template already applied, or plain text)
// with a request's settings: the reference every answer must equal (the lossless promise).
export async function reference(rewind, model, prompt, req) {
  const dir = mkdtempSync(join(tmpdir(), 'rewind-ref-'));
  try {
    const file = join(dir, 'prompt.txt');
    writeFileSync(file, prompt);
    const flags = ['-n', String(req.max_tokens), '--temp', String(req.temperature ?? 1)];
    if (req.seed !== undefined) flags.push('--seed', String(req.seed));
    // The replicas' request caches are F32 (the library's default); the CLI's default is F16.
    const { stdout } = await run(rewind, ['generate', '-m', model, '--json', '-f', file, ...flags],
                                 { maxBuffer: 1 << 26 });
    return JSON.parse(stdout).generated_text;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// The chat template's text for these messages, from one replica (every replica gives the same).
export async function templateOf(url, messages) {
  const r = await fetch(`${url}/apply-template`, { method: 'POST', body: JSON.stringify({ messages }) });
  if (r.status !== 200) throw new Error(`/apply-template: ${r.status} ${await r.text()}`);
  return (await r.json()).prompt;
}

// Runs fn over items with at most `limit` at once; resolves to the results in order.
export async function pool(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) { const i = next++; out[i] = await fn(items[i], i); }
  }));
  return out;
}

// A streamed completion's text, its replica and the time to its first token (ms); throws what the
// stream throws (a stream broken mid-way).
export async function streamed(client, create, req, headers = {}) {
  const t0 = performance.now();
  const { data: stream, response } = await create({ ...req, stream: true }, { headers }).withResponse();
  let text = '', ttft = -1, finish = null;
  for await (const c of stream) {
    for (const ch of c.choices) {
      const piece = ch.delta ? (ch.delta.content ?? '') : (ch.text ?? '');
      if (piece && ttft < 0) ttft = performance.now() - t0;
      text += piece;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, ttft, finish, replica: response.headers.get('x-rewind-replica') };
}

// Runs a script (roll.sh) in the background: { done (a promise of { code, out }) }.
export function background(cmd, args, env) {
  const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d) => { out += d; });
  p.stderr.on('data', (d) => { out += d; });
  return { proc: p, done: new Promise((resolve) => p.on('exit', (code) => resolve({ code, out }))) };
}
