// End-to-end test of tool calling through the official openai client, on a `rewind make-dummy`
// model carrying Qwen2.5's vocabulary and chat template: a second turn sending tool results back
// renders as Qwen2.5's template does (../shared/chat/tool_goldens.jsonl) and is answered; streamed
// and non-streamed answers with tools are equal (content, tool_calls, finish_reason); tool_choice
// "required" and a named function answer calls whose arguments validate (ajv) against the
// function's parameters; tool_choice "auto" answers text or calls that validate, the same with
// speculation as without; an unknown function and malformed arguments are 400s naming the field.
// Usage: node tools_test.mjs --rewind BUILD/bin/rewind --shared SHARED_DIR   (exit 77: skipped)
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadOpenAI, loadAjv, parseArgs, startServer, rewindPath, execFileSync, here } from './lib.mjs';

const OpenAI = await loadOpenAI();
const ajv = await loadAjv();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), shared: join(here, '..', '..', '..', 'shared') });
const dir = mkdtempSync(join(tmpdir(), 'rewind-tools-'));
const model = join(dir, 'qwen25-dummy.gguf');
execFileSync(args.rewind, ['make-dummy', '--shape', 'tiny', '--type', 'q8_0', '-t', '1', '-o', model,
  '--vocab', join(args.shared, 'vocab', 'ggml-vocab-qwen2.gguf'),
  '--chat-template-file', join(args.shared, 'chat', 'templates', 'qwen2_5.jinja')], { stdio: 'ignore' });
const server = await startServer(args.rewind, ['-m', model, '--parallel', '4', '-t', '1']);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
let failures = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try { await fn(); console.log(`ok   ${name} (${Date.now() - t0} ms)`); }
  catch (e) { ++failures; console.log(`FAIL ${name}: ${e.stack ?? e}`); }
}
// The conversations as OpenAI's clients send them: arguments as JSON strings.
const asOpenAI = (messages) => messages.map((m) => (m.tool_calls
  ? { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: JSON.stringify(c.function.arguments) } })) }
  : m));
const goldens = readFileSync(join(args.shared, 'chat', 'tool_goldens.jsonl'), 'utf8').split('\n').filter(Boolean)
  .map((l) => JSON.parse(l)).filter((g) => g.template === 'qwen2_5' && g.add_generation_prompt);
// A streamed answer put back together as the openai client's accumulator does.
async function reassemble(stream) {
  const msg = { content: null, tool_calls: [] };
  let finish = null;
  for await (const c of stream) {
    for (const ch of c.choices) {
      if (ch.delta.content) msg.content = (msg.content ?? '') + ch.delta.content;
      for (const t of ch.delta.tool_calls ?? []) {
        const cur = msg.tool_calls[t.index] ??= { id: t.id, type: t.type, function: { name: '', arguments: '' } };
        if (t.function?.name) cur.function.name += t.function.name;
        if (t.function?.arguments) cur.function.arguments += t.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { msg, finish };
}

try {
  await check('a second turn with tool results renders as the goldens and is answered', async () => {
    assert.ok(goldens.length >= 4);
    for (const g of goldens) {
      const body = { model: 'm', messages: asOpenAI(g.messages), tools: g.tools };
      const r = await fetch(`${server.url}/apply-template`, { method: 'POST', body: JSON.stringify(body) });
      assert.equal(r.status, 200);
      assert.equal((await r.json()).prompt, g.text);
      const a = await client.chat.completions.create({ ...body, max_tokens: 8, temperature: 0 });
      assert.ok(a.usage.prompt_tokens > 0 && a.choices[0].finish_reason);
    }
  });

  await check('streamed and non-streamed answers with tools are equal', async () => {
    const g = goldens.find((x) => x.messages.some((m) => m.role === 'tool'));
    for (const seed of [1, 2, 3]) {
      const req = { model: 'm', messages: asOpenAI(g.messages), tools: g.tools, max_tokens: 24, temperature: 1, seed };
      const whole = (await client.chat.completions.create(req)).choices[0];
      const s = await reassemble(await client.chat.completions.create({ ...req, stream: true }));
      assert.equal(s.msg.content, whole.message.content);
      assert.deepEqual(s.msg.tool_calls, whole.message.tool_calls ?? []);
      assert.equal(s.finish, whole.finish_reason);
    }
  });

  // Bounded schemas, so that the dummy model's random text still closes each call.
  const forcedTools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', additionalProperties: false, required: ['city', 'days'],
      properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } } } } },
    { type: 'function', function: { name: 'set_mode', parameters: { type: 'object', additionalProperties: false, required: ['mode'],
      properties: { mode: { enum: ['fast', 'slow'] }, level: { type: 'number', minimum: 0, maximum: 1 } } } } },
  ];
  const validators = Object.fromEntries(forcedTools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
  const assertValidCalls = (choice, only) => {
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.ok(choice.message.tool_calls.length >= 1);
    for (const c of choice.message.tool_calls) {
      if (only) assert.equal(c.function.name, only);
      const validate = validators[c.function.name];
      assert.ok(validate, c.function.name);
      assert.ok(validate(JSON.parse(c.function.arguments)), `${c.function.arguments}: ${JSON.stringify(validate.errors)}`);
    }
  };

  await check("tool_choice 'required' and a named function: calls whose arguments validate, streamed as whole", async () => {
    const base = { model: 'm', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools: forcedTools, max_tokens: 400 };
    for (const seed of [1, 2, 3]) {
      for (const [choice, only] of [['required', null], [{ type: 'function', function: { name: 'set_mode' } }, 'set_mode']]) {
        for (const parallel of [true, false]) {
          const req = { ...base, tool_choice: choice, parallel_tool_calls: parallel, temperature: 1, seed };
          const whole = (await client.chat.completions.create(req)).choices[0];
          assertValidCalls(whole, only);
          if (!parallel) assert.equal(whole.message.tool_calls.length, 1);
          const s = await reassemble(await client.chat.completions.create({ ...req, stream: true }));
          const noIds = (calls) => calls.map(({ id, ...c }) => c); // ids number the response
          assert.deepEqual(noIds(s.msg.tool_calls), noIds(whole.message.tool_calls));
          assert.equal(s.finish, whole.finish_reason);
        }
      }
    }
  });

  // tool_choice auto: the text is free until the model opens a call; from the tag on, the call is
  // held to the forced calls' grammar. The dummy model opens calls only now and then, so a bias
  // on the tag's token makes it open them within the answer (inside a JSON string the tag is text).
  const openTag = JSON.parse(`[${execFileSync(args.rewind, ['tokenize', '-m', model, '--no-bos', '-p', '<tool_call>'],
    { encoding: 'utf8' }).trim().replace(/\s+/g, ',')}]`);
  await check("tool_choice 'auto': text, or calls whose arguments validate; speculation changes nothing", async () => {
    assert.equal(openTag.length, 1);
    const base = { model: 'm', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools: forcedTools,
      tool_choice: 'auto', max_tokens: 80, temperature: 1, logit_bias: { [openTag[0]]: 10 } };
    const blocks = /<tool_call>\n([\s\S]*?)\n<\/tool_call>/g;
    const ask = (req, source) => client.chat.completions.create({ ...req, speculation: { source } }).then((a) => a.choices[0]);
    const noIds = (m) => ({ ...m, tool_calls: m.tool_calls?.map(({ id, ...c }) => c) });
    const runs = [];
    for (const seed of [1, 2, 3]) {
      for (const parallel of [true, false]) {
        const req = { ...base, seed, parallel_tool_calls: parallel };
        runs.push(Promise.all(['none', 'ngram', 'suffix'].map((source) => ask(req, source))).then((a) => ({ seed, parallel, a })));
      }
    }
    let calls = 0;
    for (const { seed, parallel, a: [plain, ...specs] } of await Promise.all(runs)) {
      for (const spec of specs) {
        assert.deepEqual(noIds(spec.message), noIds(plain.message), `seed ${seed} parallel ${parallel}`);
        assert.equal(spec.finish_reason, plain.finish_reason);
      }
      if (plain.finish_reason === 'tool_calls') {
        assertValidCalls(plain, null);
        calls += plain.message.tool_calls.length;
        if (!parallel) assert.equal(plain.message.tool_calls.length, 1);
        continue;
      }
      // Text (calls with text after them, or cut by length): every closed call in it is valid too.
      for (const [, body] of (plain.message.content ?? '').matchAll(blocks)) {
        const call = JSON.parse(body);
        assert.ok(validators[call.name](call.arguments), body);
        ++calls;
      }
    }
    assert.ok(calls > 0, 'no call was opened: the test proves nothing');
  });

  await check('an unknown named function, a response_format beside a forced call, malformed arguments: 400 naming the field', async () => {
    const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: goldens[0].tools, max_tokens: 4 };
    const bad = async (req, param) => {
      await assert.rejects(client.chat.completions.create(req), (e) => e.status === 400 && e.error?.param === param);
    };
    await bad({ ...base, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice.function.name');
    await bad({ ...base, tool_choice: 'required', response_format: { type: 'json_object' } }, 'response_format');
    await bad({ ...base, tools: undefined, tool_choice: 'required' }, 'tool_choice');
    const turn = asOpenAI(goldens.find((x) => x.messages.some((m) => m.tool_calls)).messages);
    turn[1].tool_calls[0].function.arguments = '{"city": ';
    await bad({ ...base, messages: turn }, 'messages[1].tool_calls[0].function.arguments');
  });
} finally {
  server.proc.kill('SIGTERM');
  await server.exited;
  rmSync(dir, { recursive: true, force: true });
}
console.log(failures ? `${failures} FAILED` : 'all passed');
process.exit(failures ? 1 : 0);
