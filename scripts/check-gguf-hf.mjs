// Reads GGUF files with Hugging Face's independent parser (npm @huggingface/gguf) and checks
// what llama.cpp's loader relies on: the tensor table (known types, whole blocks, offsets aligned
// and in order, data inside the file) and the llama architecture's required keys and tensor names.
// A development check of `rewind make-dummy`'s writer, not part of the test suite:
//   (cd /tmp/hfg && npm install @huggingface/gguf) && NODE_PATH=/tmp/hfg/node_modules \
//     node scripts/check-gguf-hf.mjs FILE.gguf ...
import { statSync } from "node:fs";
import { createRequire } from "node:module";
import { resolve } from "node:path";

const require = createRequire(resolve(process.env.NODE_PATH ?? ".", "x.js"));
const { gguf } = await import(require.resolve("@huggingface/gguf"));

// ggml type id -> [elements per block, bytes per block] (GGUF's block layouts)
const BLOCKS = { 0: [1, 4], 1: [1, 2], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24], 8: [32, 34],
                 12: [256, 144], 13: [256, 176], 14: [256, 210], 30: [1, 2] };
const LAYER = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"];

let failures = 0;
for (const file of process.argv.slice(2)) {
  const errs = [];
  const { metadata: md, tensorInfos: tensors, tensorDataOffset } = await gguf(resolve(file), { allowLocalFile: true });
  const size = statSync(file).size;
  const align = Number(md["general.alignment"] ?? 32);
  const arch = md["general.architecture"];
  if (arch !== "llama") errs.push(`architecture ${arch}`);
  const need = ["context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base"];
  for (const k of need) if (md[`${arch}.${k}`] === undefined) errs.push(`missing ${arch}.${k}`);
  for (const k of ["tokenizer.ggml.model", "tokenizer.ggml.tokens", "general.file_type"])
    if (md[k] === undefined) errs.push(`missing ${k}`);
  if (Number(tensorDataOffset) % align !== 0) errs.push(`tensor data at ${tensorDataOffset}, not ${align}-aligned`);
  let end = 0n;
  const names = new Set();
  for (const t of tensors) {
    names.add(t.name);
    const b = BLOCKS[t.dtype];
    const n = t.shape.reduce((a, x) => a * BigInt(x), 1n);
    if (!b) { errs.push(`${t.name}: type ${t.dtype}`); continue; }
    if (BigInt(t.shape[0]) % BigInt(b[0]) !== 0n) errs.push(`${t.name}: row ${t.shape[0]} not whole blocks`);
    const bytes = (n / BigInt(b[0])) * BigInt(b[1]);
    const off = BigInt(t.offset);
    if (off % BigInt(align) !== 0n) errs.push(`${t.name}: offset ${off} not aligned`);
    if (off < end) errs.push(`${t.name}: overlaps the previous tensor`);
    end = off + bytes;
    if (tensorDataOffset + end > BigInt(size)) errs.push(`${t.name}: data past the end of the file`);
  }
  const layers = Number(md[`${arch}.block_count`]);
  for (const n of ["token_embd.weight", "output_norm.weight"]) if (!names.has(n)) errs.push(`no ${n}`);
  for (let i = 0; i < layers; ++i)
    for (const n of LAYER) if (!names.has(`blk.${i}.${n}.weight`)) errs.push(`no blk.${i}.${n}.weight`);
  const vocab = md["tokenizer.ggml.tokens"]?.length;
  const emb = tensors.find((t) => t.name === "token_embd.weight");
  if (emb && Number(emb.shape[1]) !== vocab) errs.push(`token_embd rows ${emb.shape[1]} != vocabulary ${vocab}`);
  const types = {};
  for (const t of tensors) types[t.dtype] = (types[t.dtype] ?? 0) + 1;
  console.log(`${errs.length ? "FAIL" : "ok  "} ${file}: ${tensors.length} tensors, ${layers} layers, vocab ${vocab}, ` +
              `file_type ${md["general.file_type"]}, types ${JSON.stringify(types)}, data ends ${tensorDataOffset + end} of ${size}`);
  for (const e of errs.slice(0, 10)) console.log(`     ${e}`);
  if (errs.length) ++failures;
}
process.exit(failures ? 1 : 0);
