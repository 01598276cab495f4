// Hand-written cases for check.mjs: numeric bounds checked exhaustively over ranges, regexes
// against JavaScript's RegExp, formats, and patterns together with lengths (ajv as the truth).

// Exact comparison of a big integer with a schema's bounds (their double values, exactly).
function inRange(v, s) {
  const big = (x) => BigInt(Math.round(x)) === BigInt(Math.floor(x)) && Number.isInteger(x) ? BigInt(x) : null;
  if (s.minimum !== undefined && (big(s.minimum) ?? BigInt(Math.ceil(s.minimum))) > v) return false;
  if (s.maximum !== undefined && (big(s.maximum) ?? BigInt(Math.floor(s.maximum))) < v) return false;
  if (s.exclusiveMinimum !== undefined && BigInt(Math.floor(s.exclusiveMinimum)) >= v) return false;
  if (s.exclusiveMaximum !== undefined && BigInt(Math.ceil(s.exclusiveMaximum)) <= v) return false;
  return true;
}

// The digit grammars: every integer around the bounds, and big ones.
async function integerBounds({ convert, expect, fail, ajv }) {
  const schemas = [
    { type: "integer", minimum: 1, maximum: 500 }, { type: "integer", minimum: -13, maximum: 127 },
    { type: "integer", minimum: -1000, maximum: -7 }, { type: "integer", exclusiveMinimum: 9, exclusiveMaximum: 101 },
    { type: "integer", minimum: 95 }, { type: "integer", maximum: -95 }, { type: "integer", minimum: 0, maximum: 0 },
    { type: "integer", minimum: 2.5, maximum: 19.5 }, { type: "integer", exclusiveMinimum: -3.5, maximum: 1009 },
    { type: "integer", minimum: 100000000000000000000 },
    { type: "number", minimum: -2.5, maximum: 3.25 }, { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 },
    { type: "number", minimum: 10.05 }, { type: "number", maximum: -0.5 }, { type: "number", minimum: 7, exclusiveMaximum: 12 },
  ];
  const out = convert(schemas.map((s) => ({ json_schema: s })));
  let n = 0;
  for (let i = 0; i < schemas.length; i++) {
    if (out[i].error) { fail(`bounds ${JSON.stringify(schemas[i])}: ${out[i].error}`); continue; }
    const validate = ajv.compile(schemas[i]);
    const texts = [];
    for (let v = -1100; v <= 1100; v++) texts.push(String(v));
    for (let v = -30; v <= 130; v++) texts.push((v / 10).toString(), (v / 4).toString(), (v / 100).toFixed(2));
    texts.push("99999999999999999999", "100000000000000000000", "123456789012345678901234567890", "-0", "01", "1.", "1e2", "10.050", "10.0500001", "10.04999");
    for (const t of new Set(texts)) {
      n++;
      // ajv sees the parsed value; the grammar also refuses spellings JSON.stringify would not
      // write for an integer ("-0", "1.0") and, under bounds, exponents.
      let valid = validate(JSON.parse(t.startsWith("0") && t.length > 1 && t[1] !== "." ? "null" : t.endsWith(".") ? "null" : t));
      if (t === "-0" || (schemas[i].type === "integer" && t.includes(".")) || t.includes("e")) valid = false;
      // Past 2^53 ajv compares rounded doubles; the grammar compares exactly with the bound's value.
      if (/^-?[0-9]+$/.test(t) && Math.abs(Number(t)) > 2 ** 53) valid = inRange(BigInt(t), schemas[i]);
      await expect(out[i].gbnf, t, valid, `bounds ${JSON.stringify(schemas[i])}`);
    }
  }
  console.log(`bounds: ${schemas.length} schemas, ${n} texts`);
}

const regexCases = [
  ["abc", ["abc", "ab", "abcd", "xabc"]],
  ["^a+b?$", ["a", "aab", "b", "aabb", ""]],
  ["(?:ab|cd){2,3}", ["abcd", "ab", "abcdab", "abababab", "cdcd"]],
  ["[^a-c\\d]x", ["dx", "ax", "5x", "\u00e9x", "x"]],
  ["\\w+@\\w+\\.com", ["a@b.com", "a@b.org", "@b.com"]],
  ["a.c", ["abc", "a\nc", "a\u00e9c", "ac"]],
  ["\\s*-?\\d{1,3}", [" 12", "-123", "1234", "", "\t-0"]],
  ["[a-z]{2}|[0-9]{3,}", ["ab", "abc", "123", "12", "12345"]],
  ["x\\.y\\/z\\u0041\\x42", ["x.y/zAB", "xay/zAB"]],
  ["(a|b)*c", ["c", "ababc", "abab"]],
  ["[\\-+]?[0-9]+", ["-1", "+22", "3", "--1"]],
  ["colou?r", ["color", "colour", "colouur"]],
  ["[-0-9a]x\\^", ["-x^", "5x^", "ax^", "bx^", "\u02d0x^"]],
];

// Regexes: the whole-match language against JavaScript's RegExp (flag u), and as a schema's
// `pattern` (anywhere in the string) against ajv.
async function regexes({ convert, expect, fail, ajv }) {
  const whole = convert(regexCases.map(([p]) => ({ regex: p })));
  const schemas = regexCases.map(([p]) => ({ type: "string", pattern: p }));
  const asPattern = convert(schemas.map((s) => ({ json_schema: s })));
  for (let i = 0; i < regexCases.length; i++) {
    const [p, texts] = regexCases[i];
    if (whole[i].error || asPattern[i].error) { fail(`regex ${p}: ${whole[i].error || asPattern[i].error}`); continue; }
    const re = new RegExp(`^(?:${p})$`, "u");
    const validate = ajv.compile(schemas[i]);
    for (const t of texts) {
      await expect(whole[i].gbnf, t, re.test(t), `regex /${p}/`);
      await expect(asPattern[i].gbnf, JSON.stringify(t), validate(t), `pattern /${p}/`);
    }
  }
  const refused = ["a(?=b)", "(?!x)y", "(?<=a)b", "(a)\\1", "\\bword", "a^b", "a$b", "[z-a]", "(ab", "a{2,1}", "*a"];
  const out = convert(refused.map((p) => ({ regex: p })));
  for (let i = 0; i < refused.length; i++)
    if (!out[i].error || !/at byte \d+/.test(out[i].error)) fail(`regex ${refused[i]} not refused with a byte offset: ${JSON.stringify(out[i])}`);
  console.log(`regex: ${regexCases.length} patterns, ${refused.length} refused as expected`);
}

// Formats, and patterns or formats together with lengths (the intersection).
async function strings({ convert, expect, fail, ajv }) {
  const cases = [
    [{ type: "string", format: "date" }, ["2024-02-29", "2023-02-29", "2000-02-29", "1900-02-29", "2023-04-31", "2023-12-31", "2023-13-01", "2023-1-01"]],
    [{ type: "string", format: "time" }, ["12:34:56Z", "23:59:59.123+05:30", "24:00:00Z", "12:60:00Z", "12:34:56"]],
    [{ type: "string", format: "date-time" }, ["2024-01-15T10:20:30Z", "2024-01-15t10:20:30.5-01:00", "2024-01-15 10:20:30Z", "2024-01-15T10:20Z"]],
    [{ type: "string", format: "uuid" }, ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000", "123e4567e89b12d3a456426614174000"]],
    [{ type: "string", format: "email" }, ["a.b@example.com", "x@y", "a@b.c", "@b.com", "a b@c.com"]],
    [{ type: "string", pattern: "^[a-z]+$", minLength: 2, maxLength: 4 }, ["a", "ab", "abcd", "abcde", "aB"]],
    [{ type: "string", pattern: "b", maxLength: 3 }, ["b", "abc", "abcd", "aaa", ""]],
    [{ type: "string", pattern: "^(ab)*$", minLength: 3 }, ["ab", "abab", "ababab", ""]],
    [{ type: "string", format: "date", pattern: "^2024" }, ["2024-02-29", "2023-02-28"]],
    [{ type: "string", minLength: 2, maxLength: 3 }, ["a", "ab", "abc", "abcd", "\u00e9\u00e9", "\ud83d\ude00\ud83d\ude00"]],
    [{ type: "string", pattern: "^.{0,1000000}$", maxLength: 2 }, ["", "ab", "abc"]],
  ];
  const out = convert(cases.map(([s]) => ({ json_schema: s })));
  for (let i = 0; i < cases.length; i++) {
    if (out[i].error) { fail(`${JSON.stringify(cases[i][0])}: ${out[i].error}`); continue; }
    const validate = ajv.compile(cases[i][0]);
    for (const t of cases[i][1]) await expect(out[i].gbnf, JSON.stringify(t), validate(t), JSON.stringify(cases[i][0]));
    // Spellings: an escaped form of a valid string is the same string.
    const t = cases[i][1].find((x) => validate(x));
    if (t) await expect(out[i].gbnf, JSON.stringify(t).replace(/[a-z]/, (c) => "\\u00" + c.charCodeAt(0).toString(16)), true, `${JSON.stringify(cases[i][0])} escaped`);
  }
  console.log(`strings: ${cases.length} schemas`);
}

// The "any JSON value" grammar (json_object), compact and free, against JSON.parse.
async function anyJson({ convert, expect, fail }) {
  const texts = ['{"a":[1,2,{"b":null}],"c":"\\u00e9\\n"}', "[]", '"x"', "-0.5e+3", "0", "true", "null", "tru",
                 '{"a":}', "[1,]", "01", '{"a":1,"a":2}', '"\\ud83d\\ude00"', "[[[[[[[[[[[[]]]]]]]]]]]]", '{"":{}}', "1.", '"\\x"'];
  const out = convert([{ any_json: true }, { any_json: true, free: true }, { json_schema: {} }, { json_schema: true }]);
  const parses = (t) => { try { JSON.parse(t); return true; } catch { return false; } };
  for (const o of out) if (o.error) fail(`any JSON: ${o.error}`);
  for (const t of texts) {
    for (const o of out) await expect(o.gbnf, t, parses(t), "any JSON");
    await expect(out[1].gbnf, ` ${t.replace(/,/g, " ,\n ")} `, parses(t), "any JSON (free)");
  }
  console.log(`any JSON: ${texts.length} texts, 4 grammars`);
}

export async function extraChecks(t) {
  await anyJson(t);
  await integerBounds(t);
  await regexes(t);
  await strings(t);
}
