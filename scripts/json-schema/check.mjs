// Outside checks of rewind's JSON Schema and regex front ends: XGrammar's web build accepts or
// refuses texts by rewind's GBNF (printed by gbnf_of), ajv validates, json-schema-faker makes
// instances, and the JSON Schema Test Suite's draft 4 cases give valid and invalid ones. With
// --rewind, rewind's own matcher (`rewind grammar --json-schema S | --regex RE --texts F`) is a
// second acceptor of every text, held to the expected verdict (no oracle doubt excuses it).

//   node check.mjs --gbnf-of PATH --shared DIR [--rewind PATH] [--verbose]
// Exit 0: all agree; 1: a disagreement (listed); 77: node_modules missing (npm ci not run).
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith("--") ? all[i + 1] : true]);
  return acc;
}, []));
if (!existsSync(join(here, "node_modules", "@mlc-ai", "web-xgrammar"))) {
  console.log("SKIP: scripts/json-schema/node_modules missing (run npm ci there)");
  process.exit(77);
}
const { default: Ajv4 } = await import("ajv-draft-04");
const { default: Ajv2020 } = await import("ajv/dist/2020.js");
const { default: addFormats } = await import("ajv-formats");
const { createGeneratorSync } = await import("json-schema-faker");

// The bundle is UMD: a .cjs copy loads it as CommonJS.
const tmp = mkdtempSync(join(tmpdir(), "rewind-xgrammar-"));
copyFileSync(join(here, "node_modules/@mlc-ai/web-xgrammar/lib/index.js"), join(tmp, "xgrammar.cjs"));
const xg = createRequire(import.meta.url)(join(tmp, "xgrammar.cjs"));
process.on("exit", () => rmSync(tmp, { recursive: true, force: true }));

const gbnfOf = args["gbnf-of"];
const shared = args.shared;
const verbose = !!args.verbose;
let failures = 0, checks = 0, doubtful = 0;
const fail = (what) => { failures++; if (failures <= 60) console.log("FAIL " + what); };

// Converts requests in one run of gbnf_of.
function convert(requests) {
  const input = requests.map((r) => JSON.stringify(r)).join("\n") + "\n";
  const r = spawnSync(gbnfOf, ["--batch"], { input, encoding: "utf8", maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error("gbnf_of failed: " + r.stderr);
  const out = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  out.forEach((o, i) => { if (o.gbnf && !sources.has(o.gbnf)) sources.set(o.gbnf, requests[i]); });
  return out;
}

// rewind's own acceptor: the texts each grammar must accept or refuse, checked in one run of
// `rewind grammar` per grammar at the end (its source given as the schema or regex it came from).
const rewind = args.rewind;
const sources = new Map(); // GBNF -> the gbnf_of request it came from
const pending = new Map(); // GBNF -> [{text, expected, label}]
let rewindChecks = 0;
function checkWithRewind() {
  let n = 0;
  for (const [gbnf, cases] of pending) {
    const req = sources.get(gbnf);
    const dir = join(tmp, `g${n++}`);
    const argv = ["grammar", "--texts", join(tmp, "texts.jsonl")];
    if (req && req.json_schema !== undefined) {
      writeFileSync(dir + ".json", JSON.stringify(req.json_schema));
      argv.push("--json-schema", dir + ".json", "--json-whitespace", req.free ? "free" : "compact");
    } else if (req && req.regex !== undefined) {
      argv.push("--regex", req.regex);
    } else {
      writeFileSync(dir + ".gbnf", gbnf);
      argv.push("--grammar", dir + ".gbnf");
    }
    writeFileSync(join(tmp, "texts.jsonl"), cases.map((c) => JSON.stringify(c.text)).join("\n") + "\n");
    const r = spawnSync(rewind, argv, { encoding: "utf8", maxBuffer: 1 << 28 });
    if (r.status !== 0) { fail(`rewind ${argv.slice(0, 3).join(" ")} ...: exit ${r.status}: ${r.stderr.trim()}`); continue; }
    const verdicts = r.stdout.trim().split("\n");
    cases.forEach((c, i) => {
      rewindChecks++;
      if ((verdicts[i] === "complete") !== c.expected)
        fail(`rewind: ${c.label}: ${JSON.stringify(c.text)} ${c.expected ? "refused" : "accepted"} (${verdicts[i]})`);
    });
  }
}

const grammars = new Map();
async function grammar(gbnf) {
  if (!grammars.has(gbnf)) grammars.set(gbnf, await xg.Grammar.fromEBNF(gbnf, "root"));
  return grammars.get(gbnf);
}
const ascii = (s) => /^[\x00-\x7f]*$/.test(s);
// Checks that the grammar's verdict on `text` is `expected`; non-ASCII texts the oracle refuses
// while they should be accepted are counted as doubtful (its string check refuses some of them).
async function expect(gbnf, text, expected, label) {
  checks++;
  if (rewind) {
    if (!pending.has(gbnf)) pending.set(gbnf, []);
    pending.get(gbnf).push({ text, expected, label });
  }
  const got = await xg.Testings.isGrammarAcceptString(await grammar(gbnf), text);
  if (got === expected) return true;
  if (!ascii(text) && expected && !got) { doubtful++; return true; }
  fail(`${label}: ${JSON.stringify(text)} ${expected ? "refused" : "accepted"}`);
  return false;
}

const ajv4 = addFormats(new Ajv4({ strict: false, validateFormats: true }));
const ajv = addFormats(new Ajv2020({ strict: false }));

// Properties in the order the schema declares them (the one freedom of the grammar).
function reorder(data, schema, root, depth = 0) {
  if (depth > 50 || schema === null || typeof schema !== "object") return data;
  if (schema.$ref && schema.$ref.startsWith("#")) {
    const path = schema.$ref.slice(1).split("/").filter(Boolean).map((p) => decodeURIComponent(p).replace(/~1/g, "/").replace(/~0/g, "~"));
    let t = root;
    for (const p of path) t = t?.[p];
    return t === undefined ? data : reorder(data, t, root, depth + 1);
  }
  if (Array.isArray(data)) {
    const prefix = Array.isArray(schema.items) ? schema.items : schema.prefixItems || [];
    const rest = Array.isArray(schema.items) ? schema.additionalItems : schema.items;
    return data.map((x, i) => reorder(x, i < prefix.length ? prefix[i] : rest, root, depth + 1));
  }
  if (data !== null && typeof data === "object") {
    const props = schema.properties || {};
    const out = {};
    for (const k of Object.keys(props)) if (k in data) out[k] = reorder(data[k], props[k], root, depth + 1);
    for (const k of Object.keys(data)) if (!(k in props)) out[k] = reorder(data[k], schema.additionalProperties, root, depth + 1);
    return out;
  }
  return data;
}

// Small changes that often make an instance invalid.
function mutations(x) {
  const out = [];
  if (x !== null && typeof x === "object" && !Array.isArray(x)) {
    for (const k of Object.keys(x)) {
      const y = { ...x }; delete y[k]; out.push(y);
      out.push({ ...x, [k]: 12345678901234567890 });
      out.push({ ...x, [k]: "x".repeat(130) });
      out.push({ ...x, [k]: null });
      if (typeof x[k] === "number") out.push({ ...x, [k]: x[k] + 1000 }, { ...x, [k]: -x[k] - 1 }, { ...x, [k]: x[k] + 0.5 });
      if (typeof x[k] === "string") out.push({ ...x, [k]: x[k] + " -" }, { ...x, [k]: "" });
      if (Array.isArray(x[k])) out.push({ ...x, [k]: [...x[k], ...x[k], ...x[k]] }, { ...x, [k]: [1] });
    }
    out.push({ ...x, extra_key: 1 });
  }
  out.push([x], "text", 3);
  return out;
}


// 1. The workload's schemas: faker instances accepted (compact and free whitespace), mutations
// refused exactly when ajv refuses them.
async function workloadSchemas() {
  const lines = readFileSync(join(shared, "workloads/json.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
  const schemas = [...new Map(lines.filter((l) => l.json_schema).map((l) => [JSON.stringify(l.json_schema), l.json_schema])).values()];
  const compact = convert(schemas.map((s) => ({ json_schema: s })));
  const free = convert(schemas.map((s) => ({ json_schema: s, free: true })));
  const gen = createGeneratorSync({ seed: 7 });
  let instances = 0, mutants = 0;
  for (let i = 0; i < schemas.length; i++) {
    if (compact[i].error) { fail(`workload schema ${i}: ${compact[i].error}`); continue; }
    const validate = ajv.compile(schemas[i]);
    for (let n = 0; n < 25; n++) {
      const x = reorder(gen.generate(schemas[i]), schemas[i], schemas[i]);
      if (!validate(x)) continue;
      instances++;
      await expect(compact[i].gbnf, JSON.stringify(x), true, `workload ${i} instance`);
      await expect(free[i].gbnf, JSON.stringify(x, null, 2), true, `workload ${i} instance (free)`);
      await expect(compact[i].gbnf, JSON.stringify(x, null, 1), false, `workload ${i} whitespace (compact)`);
      for (const m of mutations(x)) {
        mutants++;
        await expect(compact[i].gbnf, JSON.stringify(m), validate(m), `workload ${i} mutant (ajv: ${validate(m)})`);
      }
    }
  }
  console.log(`workload: ${schemas.length} schemas, ${instances} faker instances, ${mutants} mutants`);
}

// 2. The JSON Schema Test Suite, draft 4: every case of a schema rewind compiles agrees with the
// suite (and ajv); faker instances are accepted and their mutations refused exactly when ajv
// refuses them; a schema it refuses is refused with an argument (or capacity) error.
async function testSuite() {
  const dir = join(here, "node_modules/json-schema-test-suite/tests/draft4");
  const groups = [];
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".json")))
    for (const g of JSON.parse(readFileSync(join(dir, f), "utf8"))) groups.push({ file: f, ...g });
  const out = convert(groups.map((g) => ({ json_schema: g.schema })));
  const gen = createGeneratorSync({ seed: 11 });
  const refused = new Map();
  let compiled = 0, cases = 0, fakes = 0, mutants = 0;
  for (let i = 0; i < groups.length; i++) {
    const g = groups[i];
    if (out[i].error) {
      const key = `${g.file}`;
      refused.set(key, (refused.get(key) || 0) + 1);
      if (out[i].code !== "argument" && out[i].code !== "capacity") fail(`${g.file} "${g.description}": error code ${out[i].code}`);
      if (verbose) console.log(`refused ${g.file} "${g.description}": ${out[i].error}`);
      continue;
    }
    compiled++;
    let validate;
    try { validate = ajv4.compile(g.schema); } catch { validate = null; }
    for (const t of g.tests) {
      cases++;
      if (validate && validate(t.data) !== t.valid) fail(`ajv disagrees with the suite on ${g.file} "${t.description}"`);
      await expect(out[i].gbnf, JSON.stringify(reorder(t.data, g.schema, g.schema)), t.valid, `${g.file} "${g.description}" / "${t.description}"`);
    }
    for (let n = 0; n < 5 && validate; n++) {
      let x;
      try { x = reorder(gen.generate(g.schema), g.schema, g.schema); } catch { break; }
      if (x === undefined || !validate(x)) continue;
      fakes++;
      await expect(out[i].gbnf, JSON.stringify(x), true, `${g.file} "${g.description}" faker instance`);
      for (const m of mutations(x)) {
        mutants++;
        const y = reorder(m, g.schema, g.schema);
        await expect(out[i].gbnf, JSON.stringify(y), validate(y), `${g.file} "${g.description}" mutant (ajv: ${validate(y)})`);
      }
    }
  }
  console.log(`suite draft4: ${groups.length} schemas, ${compiled} compiled (${cases} cases, ${fakes} faker instances, ` +
              `${mutants} mutants); refused: ` +
              [...refused].map(([k, n]) => `${k} ${n}`).join(", "));
}

const { extraChecks } = await import("./check_cases.mjs");
await workloadSchemas();
await testSuite();
await extraChecks({ convert, expect, fail, ajv });
if (rewind) {
  checkWithRewind();
  console.log(`rewind grammar: ${rewindChecks} verdicts checked over ${pending.size} grammars`);
}
console.log(`${checks} texts checked, ${failures} disagreements, ${doubtful} non-ASCII texts the oracle refused (not counted)`);
process.exit(failures ? 1 : 0);
