// A rolling restart (roll.sh: SIGTERM each replica in turn, start it again, wait for /health)
// under a steady stream of requests through the balancer, streamed and not: zero failed requests,
// every answer equal to `rewind generate`'s, every replica a new process at the end.
// Usage: node rolling_test.mjs --rewind BUILD/bin/rewind --model MODEL.gguf [--balancer haproxy|nginx]
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadOpenAI, parseArgs, rewindPath, startCluster, reference, streamed, sleep, background, clusterDir } from './lib.mjs';

const OpenAI = await loadOpenAI();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), model: '', balancer: 'haproxy' });
// A pass of at least 5 ms: requests last tens of ms, so each SIGTERM finds some running.
const cluster = await startCluster({ rewind: args.rewind, balancer: args.balancer,
  serveArgs: ['-m', args.model, '-t', '1', '--throttle-ms', '5', '--shutdown-timeout', '20'] });
const client = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const complete = (q, o) => client.completions.create(q, o);

const PROMPTS = ['def fib(n):', 'class Stack:', 'import os\n\ndef walk(root):', 'for i in range(10):'];
const REQS = PROMPTS.flatMap((p) => [{ model: 'm', prompt: p, max_tokens: 16, temperature: 0 },
  { model: 'm', prompt: p, max_tokens: 16, temperature: 0.8, seed: 5 }]);

let failures = 0;
const fail = (msg) => { ++failures; console.log(`FAIL ${msg}`); };
try {
  const want = await Promise.all(REQS.map((r) => reference(args.rewind, args.model, r.prompt, r)));
  const before = cluster.replicas.map((r) => r.pid);
  let rolling = true;
  const counts = { sent: 0, streamed: 0, failed: 0, byReplica: {} };
  const deadline = Date.now() + 90000;
  // Four clients, each one request after another, streamed every other time, keys spread.
  const clients = Array.from({ length: 4 }, async (_, c) => {
    for (let n = 0; rolling && Date.now() < deadline; ++n) {
      const i = (c + n) % REQS.length;
      const headers = { 'X-Session-Id': `client-${c}-${n % 16}` };
      ++counts.sent;
      try {
        let text, replica;
        if (n % 2) {
          ({ text, replica } = await streamed(client, complete, REQS[i], headers));
          ++counts.streamed;
        } else {
          const { data, response } = await client.completions.create(REQS[i], { headers }).withResponse();
          text = data.choices[0].text;
          replica = response.headers.get('x-rewind-replica');
        }
        counts.byReplica[replica] = (counts.byReplica[replica] ?? 0) + 1;
        if (text !== want[i]) fail(`answer differs from rewind generate's: ${JSON.stringify(text)} != ${JSON.stringify(want[i])}`);
      } catch (e) {
        ++counts.failed;
        fail(`request failed: ${String(e).split('\n')[0]}`);
      }
    }
  });
  await sleep(300);
  const t0 = Date.now();
  const roll = background(join(clusterDir, 'roll.sh'), [String(cluster.port)], cluster.env);
  const { code, out } = await roll.done;
  const rollMs = Date.now() - t0;
  await sleep(300);
  rolling = false;
  await Promise.all(clients);
  console.log(`roll.sh: exit ${code} in ${rollMs} ms\n${out.trim()}`);
  assert.equal(code, 0, 'roll.sh succeeded');
  console.log(`requests: ${counts.sent} (${counts.streamed} streamed), failed: ${counts.failed}; answered by ` +
    JSON.stringify(counts.byReplica));
  if (counts.sent < 20) fail('too few requests during the restart to say anything');
  const after = cluster.replicas.map((_, i) => Number(readFileSync(join(cluster.dir, `replica-${i + 1}.pid`), 'utf8')));
  for (let i = 0; i < before.length; ++i) if (before[i] === after[i]) fail(`replica r${i + 1} was not restarted`);
} catch (e) {
  fail(e.stack ?? e);
} finally {
  await cluster.down();
}
console.log(failures ? `${failures} failure(s)` : 'all passed');
process.exit(failures ? 1 : 0);
