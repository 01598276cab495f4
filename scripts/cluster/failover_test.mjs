// A replica killed (SIGKILL) in the middle of 48 non-streamed requests through the balancer: none
// is lost (the balancer retries those the dead replica held on another one, which gives the same
// answer: the lossless promise), every answer equals `rewind generate`'s; two streams running on
// the killed replica end with an error the client sees, and the client's retry succeeds; only the
// killed replica's conversations move (consistent hashing).
// Usage: node failover_test.mjs --rewind BUILD/bin/rewind --model MODEL.gguf [--balancer haproxy|nginx]
import assert from 'node:assert/strict';
import { loadOpenAI, parseArgs, rewindPath, startCluster, reference, pool, streamed, sleep } from './lib.mjs';

const OpenAI = await loadOpenAI();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), model: '', balancer: 'haproxy' });
// --spec none and a pass of at least 10 ms: a request of 16 tokens lasts about 0.2 s, a stream of
// 300 about 3 s, so the kill finds requests running on the victim.
const cluster = await startCluster({ rewind: args.rewind, balancer: args.balancer,
  serveArgs: ['-m', args.model, '-t', '1', '--spec', 'none', '--throttle-ms', '10'] });
const client = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const complete = (q, o) => client.completions.create(q, o);
const SNIPPETS = ['def fib(n):', 'class Stack:', 'import os\n', 'for i in range(', 'def add(a, b):', 'while True:'];

// Which replica each session key maps to, asked with a one-token request.
async function replicaOf(key) {
  const r = await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 1 },
    { headers: { 'X-Session-Id': key } }).withResponse();
  return r.response.headers.get('x-rewind-replica');
}

let failures = 0;
const fail = (msg) => { ++failures; console.log(`FAIL ${msg}`); };
try {
  const victim = await replicaOf('victim-probe');
  const victimPid = cluster.replicas[Number(victim.slice(1)) - 1].pid;
  const streamKeys = [];
  for (let k = 0; streamKeys.length < 2 && k < 200; ++k) if (await replicaOf(`stream-${k}`) === victim) streamKeys.push(`stream-${k}`);
  assert.equal(streamKeys.length, 2, 'two session keys of the victim');
  const probeKeys = Array.from({ length: 30 }, (_, k) => `probe-${k}`);
  const mapBefore = await Promise.all(probeKeys.map(replicaOf));

  // Two long streams on the victim, each past its first token before the kill.
  const streamReqs = streamKeys.map((k, i) => ({ model: 'm', prompt: `${SNIPPETS[i]}  # ${k}`, max_tokens: 300, temperature: 0 }));
  const started = [];
  const streams = streamReqs.map((req, i) => {
    let firstToken;
    started.push(new Promise((r) => { firstToken = r; }));
    return (async () => {
      const { data: stream, response } = await client.completions.create({ ...req, stream: true },
        { headers: { 'X-Session-Id': streamKeys[i] } }).withResponse();
      let text = '';
      try {
        for await (const c of stream) { text += c.choices[0]?.text ?? ''; if (text) firstToken(); }
      } finally { firstToken(); }
      return { text, replica: response.headers.get('x-rewind-replica') };
    })().then((v) => ({ ok: true, ...v }), (e) => ({ ok: false, error: e }));
  });
  await Promise.race([Promise.all(started), sleep(10000)]);

  // 48 non-streamed requests, 12 at a time, keys spread over the replicas; the victim is killed
  // once 12 have finished.
  const reqs = Array.from({ length: 48 }, (_, i) => ({ model: 'm', prompt: `${SNIPPETS[i % SNIPPETS.length]}  # request ${i}`,
    max_tokens: 16, ...(i % 3 === 0 ? { temperature: 0.9, seed: i } : { temperature: 0 }) }));
  let finished = 0, killedAt = -1;
  const t0 = Date.now();
  const results = await pool(reqs, 12, async (req, i) => {
    try {
      const { data, response } = await client.completions.create(req, { headers: { 'X-Session-Id': `request-${i}` } }).withResponse();
      return { text: data.choices[0].text, replica: response.headers.get('x-rewind-replica') };
    } catch (e) {
      return { error: String(e) };
    } finally {
      if (++finished === 12) { process.kill(victimPid, 'SIGKILL'); killedAt = Date.now() - t0; }
    }
  });
  console.log(`48 requests in ${Date.now() - t0} ms; replica ${victim} (pid ${victimPid}) killed at ${killedAt} ms`);
  const lost = results.filter((r) => r.error);
  for (const r of lost) fail(`request lost: ${r.error}`);
  const byReplica = {};
  for (const r of results) if (!r.error) byReplica[r.replica] = (byReplica[r.replica] ?? 0) + 1;
  console.log(`lost: ${lost.length} of 48; answered by ${JSON.stringify(byReplica)}`);
  let mismatches = 0;
  await pool(reqs, 2, async (req, i) => {
    if (results[i].error) return;
    const want = await reference(args.rewind, args.model, req.prompt, req);
    if (want !== results[i].text) { ++mismatches; fail(`request ${i}: ${JSON.stringify(results[i].text)} != ${JSON.stringify(want)}`); }
  });
  console.log(`answers equal to rewind generate's: ${48 - lost.length - mismatches} of ${48 - lost.length}`);

  // The streams on the victim ended with an error; a retry (the same request) succeeds elsewhere.
  const ended = await Promise.all(streams);
  for (let i = 0; i < ended.length; ++i) {
    const s = ended[i];
    if (s.ok) { fail(`stream ${i} on ${s.replica} ended without an error (${s.text.length} chars)`); continue; }
    console.log(`stream ${i} on ${victim} ended with an error: ${String(s.error).split('\n')[0]}`);
    const again = await streamed(client, complete, streamReqs[i], { 'X-Session-Id': streamKeys[i] });
    const want = await reference(args.rewind, args.model, streamReqs[i].prompt, streamReqs[i]);
    if (again.replica === victim) fail(`the retry of stream ${i} went to the dead replica`);
    if (again.text !== want) fail(`the retry of stream ${i} differs from rewind generate's answer`);
    else console.log(`stream ${i} retried on ${again.replica}: ${again.text.length} chars, equal to rewind generate's`);
  }
  // Consistent hashing: the victim's death moved only the victim's conversations.
  const mapAfter = await Promise.all(probeKeys.map(replicaOf));
  let moved = 0, kept = 0;
  for (let k = 0; k < probeKeys.length; ++k) {
    if (mapBefore[k] === victim) { ++moved; if (mapAfter[k] === victim) fail(`${probeKeys[k]} still on the dead replica`); }
    else if (mapAfter[k] === mapBefore[k]) ++kept;
    else fail(`${probeKeys[k]} moved from ${mapBefore[k]} to ${mapAfter[k]} though its replica lives`);
  }
  console.log(`after the kill: ${kept} keys of the live replicas stayed where they were, ${moved} of the dead one's moved`);
  if (cluster.balancer === 'haproxy') {
    // httplog's retries field (the 5th of actconn/feconn/beconn/srv_conn/retries; '+' redispatched)
    const retried = cluster.log().split('\n').filter((l) => /POST \/v1\/completions/.test(l) && /\s[-A-Za-z]{4}\s\d+\/\d+\/\d+\/\d+\/\+?[1-9]\d*\s/.test(l));
    console.log(`requests the balancer retried: ${retried.length}`);
  }
} catch (e) {
  fail(e.stack ?? e);
} finally {
  await cluster.down();
}
console.log(failures ? `${failures} failure(s)` : 'all passed');
process.exit(failures ? 1 : 0);
