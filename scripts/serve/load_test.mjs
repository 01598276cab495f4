// Bounded load test of `rewind serve` on loopback: 64 streamed requests from 16 concurrent
// clients, half with a prediction, none lost and each identical to its answer alone; prints
// throughput and the p50/p99 time to first token.
// Usage: node load_test.mjs --rewind BUILD/bin/rewind --model MODEL.gguf [--requests 64] [--clients 16]
import assert from 'node:assert/strict';
import { loadOpenAI, parseArgs, startServer, percentile, rewindPath } from './lib.mjs';

const OpenAI = await loadOpenAI();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), model: '', requests: '64', clients: '16', threads: '1' });
const N = Number(args.requests), C = Number(args.clients);
const server = await startServer(args.rewind, ['-m', args.model, '--parallel', '8', '-t', args.threads, '--max-queue', '128']);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });

// 8 distinct prompts x {plain, predicted} x {greedy, seeded}: 32 distinct requests, each sent twice.
const heads = ['def add(a, b):', 'class Stack:\n    def __init__(self):', 'import os\n\ndef walk(path):', 'def fib(n):',
  'for i in range(10):', 'def read_lines(path):\n    with open(path) as f:', 'def is_prime(n):', 'class Point:'];
const distinct = [];
for (const [i, p] of heads.entries())
  for (const predicted of [false, true])
    distinct.push({ key: `${i}/${predicted}/${i % 2}`, predicted,
      req: { model: 'm', prompt: p, max_tokens: 32, temperature: i % 2 ? 0.8 : 0, seed: 100 + i } });

async function run(req, prediction) {
  const t0 = performance.now();
  let ttft = null, text = '', finish = null;
  const body = { ...req, stream: true, ...(prediction ? { prediction: { type: 'content', content: prediction } } : {}) };
  for await (const c of await client.completions.create(body)) {
    for (const ch of c.choices) {
      if (ch.text && ttft === null) ttft = performance.now() - t0;
      text += ch.text ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, ttft, ms: performance.now() - t0 };
}

async function generatedTokens() {
  const m = await (await fetch(`${server.url}/metrics`)).text();
  return Number(m.match(/^rewind_generated_tokens_total (\d+)/m)[1]);
}

let failed = 0;
try {
  // Solo answers, one request at a time; the predicted ones predict the solo plain answer edited.
  const solo = new Map(), prediction = new Map();
  for (const d of distinct.filter((d) => !d.predicted)) {
    const r = await run(d.req);
    solo.set(d.req.prompt + d.req.temperature, r.text);
    prediction.set(d.req.prompt, r.text.slice(0, Math.floor(r.text.length / 2)) + '\n    return None\n');
  }
  const tokensBefore = await generatedTokens();
  const work = Array.from({ length: N }, (_, i) => distinct[i % distinct.length]);
  let next = 0;
  const results = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: C }, async () => {
    while (next < work.length) {
      const d = work[next++];
      const r = await run(d.req, d.predicted ? prediction.get(d.req.prompt) : null);
      results.push({ d, r });
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  assert.equal(results.length, N, 'every request answered');
  for (const { d, r } of results) {
    if (r.text !== solo.get(d.req.prompt + d.req.temperature) || !r.finish) {
      ++failed;
      console.log(`FAIL ${d.key}: ${JSON.stringify(r.text)} != ${JSON.stringify(solo.get(d.req.prompt + d.req.temperature))}`);
    }
  }
  const generated = (await generatedTokens()) - tokensBefore;
  const ttfts = results.map((x) => x.r.ttft).filter((x) => x !== null);
  const chars = results.reduce((a, x) => a + x.r.text.length, 0);
  console.log(`load: ${N} requests, ${C} concurrent streaming clients, ${failed} differing from their solo answers`);
  console.log(`load: ${generated} tokens in ${wall.toFixed(2)} s: ${(generated / wall).toFixed(0)} tokens/s, ` +
    `${(N / wall).toFixed(1)} requests/s, ${(chars / wall).toFixed(0)} chars/s`);
  console.log(`load: time to first token p50 ${percentile(ttfts, 50).toFixed(1)} ms, p99 ${percentile(ttfts, 99).toFixed(1)} ms`);
} finally {
  server.proc.kill('SIGTERM');
  const code = await server.exited;
  if (code !== 0) { ++failed; console.log(`FAIL the server exited ${code}`); }
}
process.exit(failed ? 1 : 0);
