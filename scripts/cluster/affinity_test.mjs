// Conversation affinity through the balancer: three replicas, 12 conversations of 4 chat turns
// with a key (X-Session-Id, or with HAProxy every other one by the body's `user` field) and 12
// without one (round robin), all at once through the openai client. Every keyed turn after the
// first lands on its conversation's replica and reuses the earlier turns' KV; every answer equals
// `rewind generate`'s. Prints the second-turn cache hits with and without the key, and the time to
// first token the balancer adds (p50, loopback) against a replica asked directly.
// Usage: node affinity_test.mjs --rewind BUILD/bin/rewind --model MODEL.gguf [--balancer haproxy|nginx]
import assert from 'node:assert/strict';
import { loadOpenAI, parseArgs, percentile, rewindPath, startCluster, reference, templateOf, pool, streamed } from './lib.mjs';

const OpenAI = await loadOpenAI();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), model: '', balancer: 'haproxy' });
const cluster = await startCluster({ rewind: args.rewind, balancer: args.balancer,
  serveArgs: ['-m', args.model, '--chat-template', 'chatml', '-t', '1'] });
const client = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });

const TURNS = ['def fib(n):', 'class Stack:', 'import os\n\ndef walk(root):', 'for i in range(10):'];
const N_CONV = 12;

// One conversation: 4 turns, each sent with the whole history. key: 'header', 'user' or null.
async function conversation(c, key) {
  const messages = [{ role: 'system', content: `Conversation ${c}${key ? '' : ' (no key)'}.` }];
  const settings = c % 2 ? { temperature: 0.8, seed: c } : { temperature: 0 };
  const headers = key === 'header' ? { 'X-Session-Id': `conversation-${c}` } : {};
  const turns = [];
  for (let t = 0; t < TURNS.length; ++t) {
    messages.push({ role: 'user', content: `${TURNS[(c + t) % TURNS.length]}  # ${c}.${t}` });
    const req = { model: 'm', messages: [...messages], max_tokens: 12, ...settings };
    if (key === 'user') req.user = `user-${c}`;
    const { data, response } = await client.chat.completions.create(req, { headers }).withResponse();
    const answer = data.choices[0].message.content;
    turns.push({ req, answer, replica: response.headers.get('x-rewind-replica'),
      cached: data.usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: data.usage.prompt_tokens });
    messages.push({ role: 'assistant', content: answer });
  }
  return { c, key, turns };
}

// A turn reused its conversation's history: at least the previous turn's prompt came from the
// cache (a few tokens of the template's opening, common to every conversation, do not count).
const hit = (conv, t) => conv.turns[t].cached >= conv.turns[t - 1].prompt;
const rate = (convs) => {
  let hits = 0, n = 0;
  for (const conv of convs) for (let t = 1; t < conv.turns.length; ++t) { ++n; if (hit(conv, t)) ++hits; }
  return { hits, n, pct: (100 * hits) / n };
};

let failures = 0;
try {
  const t0 = Date.now();
  const jobs = [];
  for (let c = 0; c < N_CONV; ++c) jobs.push([c, args.balancer === 'haproxy' && c % 2 ? 'user' : 'header']);
  for (let c = 0; c < N_CONV; ++c) jobs.push([N_CONV + c, null]);
  const convs = await Promise.all(jobs.map(([c, key]) => conversation(c, key)));
  console.log(`${convs.length} conversations x ${TURNS.length} turns in ${Date.now() - t0} ms`);
  const keyed = convs.filter((v) => v.key), keyless = convs.filter((v) => !v.key);

  for (const conv of keyed) {
    for (let t = 1; t < conv.turns.length; ++t) {
      const turn = conv.turns[t];
      if (turn.replica !== conv.turns[0].replica || turn.cached <= 0 || !hit(conv, t)) {
        ++failures;
        console.log(`FAIL conversation ${conv.c} (${conv.key}) turn ${t + 1}: replica ${turn.replica} (first turn's ` +
          `${conv.turns[0].replica}), cached ${turn.cached} of ${turn.prompt} (previous prompt ${conv.turns[t - 1].prompt})`);
      }
    }
  }
  const used = new Set(keyed.map((v) => v.turns[0].replica));
  const spread = {};
  for (const v of keyless) for (const t of v.turns) spread[t.replica] = (spread[t.replica] ?? 0) + 1;
  console.log(`keyed conversations' replicas: ${[...used].sort().join(' ')}; keyless requests per replica: ${JSON.stringify(spread)}`);
  if (used.size < 2) { ++failures; console.log('FAIL the keyed conversations all went to one replica'); }
  if (Object.keys(spread).length < 3) { ++failures; console.log('FAIL keyless requests did not reach every replica'); }

  // Every answer equals rewind generate's on the template's text of the same messages.
  const all = convs.flatMap((v) => v.turns);
  let mismatches = 0;
  await pool(all, 2, async (turn) => {
    const want = await reference(args.rewind, args.model, await templateOf(cluster.url, turn.req.messages), turn.req);
    if (want !== turn.answer) {
      ++mismatches;
      console.log(`FAIL answer differs from rewind generate's: ${JSON.stringify(turn.answer)} != ${JSON.stringify(want)}`);
    }
  });
  failures += mismatches;
  console.log(`answers equal to rewind generate's: ${all.length - mismatches} of ${all.length}`);

  const a = rate(keyed), r = rate(keyless);
  console.log(`second-turn cache hits (turn >= 2 reusing the history): affinity ${a.hits}/${a.n} = ${a.pct.toFixed(1)} %, ` +
    `round robin (no key) ${r.hits}/${r.n} = ${r.pct.toFixed(1)} %`);
  if (a.pct < 95) { ++failures; console.log('FAIL affinity cache hits below 95 %'); }

  // Time to first token, streamed, one request at a time: straight to the replica a key maps to,
  // then through the balancer with that key, interleaved (the same prompt: each one's prefix is
  // cached alike).
  const probe = await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 1 },
    { headers: { 'X-Session-Id': 'ttft' } }).withResponse();
  const rid = probe.response.headers.get('x-rewind-replica');
  const direct = new OpenAI({ baseURL: `http://127.0.0.1:${cluster.replicas[Number(rid.slice(1)) - 1].port}/v1`,
    apiKey: 'none', maxRetries: 0, timeout: 60000 });
  const req = { model: 'm', prompt: 'def quicksort(xs):', max_tokens: 4, temperature: 0 };
  const ttft = { direct: [], balancer: [] };
  for (let i = 0; i < 40; ++i) {
    const d = await streamed(direct, (q, o) => direct.completions.create(q, o), req);
    const b = await streamed(client, (q, o) => client.completions.create(q, o), req, { 'X-Session-Id': 'ttft' });
    assert.equal(b.replica, rid);
    assert.equal(b.text, d.text);
    if (i >= 4) { ttft.direct.push(d.ttft); ttft.balancer.push(b.ttft); } // the first few warm up connections
  }
  const p50d = percentile(ttft.direct, 50), p50b = percentile(ttft.balancer, 50);
  console.log(`time to first token p50 (36 streamed requests each): direct ${p50d.toFixed(2)} ms, through ` +
    `${args.balancer} ${p50b.toFixed(2)} ms: +${(p50b - p50d).toFixed(2)} ms`);
} catch (e) {
  ++failures;
  console.log(`FAIL ${e.stack ?? e}`);
} finally {
  await cluster.down();
}
console.log(failures ? `${failures} failure(s)` : 'all passed');
process.exit(failures ? 1 : 0);
