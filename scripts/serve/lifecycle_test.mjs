// rewind serve's lifecycle under the openai client: a client that disconnects mid-stream has its
// request cancelled and its KV freed, one that stalls mid-body is cut off (--case disconnect); SIGTERM stops accepting, lets running
// streams finish, then exits 0, and cancels what outlives --shutdown-timeout (--case drain).
// The server sleeps 5 ms after each pass (--throttle-ms) so requests outlast the checks.
// Usage: node lifecycle_test.mjs --case disconnect|drain --rewind BUILD/bin/rewind --model MODEL.gguf
import assert from 'node:assert/strict';
import net from 'node:net';
import { loadOpenAI, parseArgs, startServer, generate, rewindPath } from './lib.mjs';

const OpenAI = await loadOpenAI();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), model: '', case: 'disconnect' });
const PROMPT = 'def add(a, b):';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const metric = (text, name) => Number(text.match(new RegExp(`^${name} (\\S+)`, 'm'))[1]);

async function disconnect() {
  const server = await startServer(args.rewind, ['-m', args.model, '--throttle-ms', '5', '--spec', 'none', '--timeout', '1']);
  try {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const ac = new AbortController();
    const stream = await client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 400, temperature: 0, stream: true },
      { signal: ac.signal });
    let chunks = 0;
    try {
      for await (const c of stream) { void c; if (++chunks === 3) ac.abort(); }
    } catch (e) { if (!(e instanceof OpenAI.APIUserAbortError) && e.name !== 'AbortError') throw e; }
    const t0 = Date.now();
    let m;
    for (;;) {
      m = await (await fetch(`${server.url}/metrics`)).text();
      if (metric(m, 'rewind_running_requests') === 0 && metric(m, 'rewind_requests_cancelled_total') === 1) break;
      assert.ok(Date.now() - t0 < 1500, `not cancelled within 1.5 s:\n${m}`);
      await sleep(20);
    }
    const ms = Date.now() - t0;
    assert.equal(metric(m, 'rewind_kv_bytes_used'), 0, 'its KV is freed');
    assert.ok(metric(m, 'rewind_passes_total') < 200, `stopped early: ${metric(m, 'rewind_passes_total')} passes of 400`);
    // The server goes on serving.
    const r = await client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 8, temperature: 0 });
    assert.equal(r.choices[0].text, generate(args.rewind, args.model, ['-p', PROMPT, '-n', '8', '--temp', '0']).text);
    console.log(`disconnect: cancelled and freed ${ms} ms after the client left, after ${metric(m, 'rewind_passes_total')} passes`);
    // A client that stalls in the middle of its body loses the connection after --timeout (1 s).
    const t1 = Date.now();
    const closed = await new Promise((resolve) => {
      const sock = net.connect(server.port, '127.0.0.1', () =>
        sock.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt"'));
      sock.on('data', () => {});
      sock.on('error', () => {});
      sock.on('close', () => resolve(Date.now() - t1));
      setTimeout(() => { sock.destroy(); resolve(-1); }, 8000);
    });
    assert.ok(closed >= 0, 'a stalled client is cut off');
    console.log(`disconnect: a client stalled mid-body was cut off after ${closed} ms (--timeout 1)`);
  } finally {
    server.proc.kill('SIGTERM');
    assert.equal(await server.exited, 0);
  }
}

async function readStream(stream) {
  let text = '', finish = null;
  for await (const c of stream) for (const ch of c.choices) { text += ch.text ?? ''; if (ch.finish_reason) finish = ch.finish_reason; }
  return { text, finish };
}

async function drain() {
  // 1. Running streams finish after SIGTERM; new connections are refused; exit 0.
  let server = await startServer(args.rewind, ['-m', args.model, '--throttle-ms', '5', '--spec', 'none', '--shutdown-timeout', '20']);
  let client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  const want = generate(args.rewind, args.model, ['-p', PROMPT, '-n', '120', '--temp', '0']).text;
  const streams = await Promise.all([0, 1].map(() =>
    client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 120, temperature: 0, stream: true })));
  const it = streams.map((s) => s[Symbol.asyncIterator]());
  const firsts = await Promise.all(it.map((i) => i.next()));
  const t0 = Date.now();
  server.proc.kill('SIGTERM');
  await sleep(100);
  // Draining: new requests are refused (503, or no connection once the server has closed).
  for (const path of ['/health', '/v1/models']) {
    const r = await fetch(`${server.url}${path}`).catch(() => null);
    assert.ok(r === null || r.status === 503, `${path} while draining: ${r && r.status}`);
  }
  const rest = await Promise.all(it.map(async (i, k) => {
    let text = firsts[k].value.choices[0].text, finish = null;
    for (let n = await i.next(); !n.done; n = await i.next())
      for (const ch of n.value.choices) { text += ch.text ?? ''; if (ch.finish_reason) finish = ch.finish_reason; }
    return { text, finish };
  }));
  for (const r of rest) { assert.equal(r.text, want, 'a running stream finishes whole'); assert.equal(r.finish, 'length'); }
  assert.equal(await server.exited, 0, 'exit status 0');
  console.log(`drain: 2 running streams finished whole, exit 0 ${Date.now() - t0} ms after SIGTERM`);

  // 2. What outlives --shutdown-timeout is cancelled: the stream ends early, still with [DONE]; exit 0.
  server = await startServer(args.rewind, ['-m', args.model, '--throttle-ms', '5', '--spec', 'none', '--shutdown-timeout', '0.3']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  const long = await client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 450, temperature: 0, stream: true });
  const li = long[Symbol.asyncIterator]();
  await li.next();
  const t1 = Date.now();
  server.proc.kill('SIGTERM');
  let text = '';
  for (let n = await li.next(); !n.done; n = await li.next()) for (const ch of n.value.choices) text += ch.text ?? '';
  const full = generate(args.rewind, args.model, ['-p', PROMPT, '-n', '450', '--temp', '0']).text;
  assert.ok(text.length < full.length, 'cancelled before its end');
  assert.equal(await server.exited, 0, 'exit status 0');
  const ms = Date.now() - t1;
  // 0.3 s, then the cancelled stream's end, then up to 2 s for idle keep-alive connections to close.
  assert.ok(ms < 8000, `exited ${ms} ms after SIGTERM`);
  console.log(`drain: a stream past --shutdown-timeout 0.3 s cancelled, exit 0 ${ms} ms after SIGTERM`);
}

await (args.case === 'drain' ? drain() : disconnect());
console.log('all checks passed');
