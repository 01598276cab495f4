#!/usr/bin/env bash
# The installed package, checked as a stranger would use it: install BUILD_DIR into a temporary
# prefix; check every installed header compiles on its own and includes nothing of GoogleTest,
# CLI11, ICU, Eigen or nlohmann-json; build tests/consumer with only find_package(rewind), and
# the same file with only pkg-config; run both on a shared model and compare their output with
# the installed `rewind generate` on the same settings; run the installed Python module.
#   tests/consumer/check.sh BUILD_DIR [SHARED_DIR]
set -euo pipefail
[ -n "${CHECK_TRACE:-}" ] && set -x
build=$(cd "${1:?usage: check.sh BUILD_DIR [SHARED_DIR]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
shared=$(cd "${2:-$here/../../../shared}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

echo "== installed headers"
inc=$prefix/include
if grep -rnE '#[[:space:]]*include[[:space:]]*[<"](gtest|gmock|CLI|Eigen|unsupported/Eigen|unicode|nlohmann)/' "$inc"; then
  echo "check.sh: an installed header includes a build-only dependency" >&2
  exit 1
fi
n=0
for h in $(cd "$inc" && find . -name '*.h' | sort); do
  h=${h#./}
  if [ "$h" = rewind_c.h ]; then
    printf '#include "%s"\n' "$h" | cc -std=c99 -Wall -Werror -fsyntax-only -I"$inc" -x c -
  fi
  printf '#include "%s"\n' "$h" | c++ -std=c++20 -fsyntax-only -I"$inc" -x c++ -
  n=$((n + 1))
done
echo "$n headers compile on their own"

echo "== find_package(rewind)"
cmake -S "$here" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
echo "== pkg-config rewind"
# shellcheck disable=SC2046
c++ -O1 "$here/rewind_example.cpp" -o "$tmp/pc_example" \
  $(PKG_CONFIG_PATH="$(dirname "$(find "$prefix" -name rewind.pc)")" pkg-config --cflags --libs rewind)

model=$shared/models/pycode-4m.gguf
draft=$shared/models/pycode-600k.gguf
prompt=$'def parse_args(argv):\n    parser = argparse.ArgumentParser()\n'
# --kv-type f32: the example's cache is the library's default, F32 (the CLI's is F16).
"$prefix/bin/rewind" generate -m "$model" --draft "$draft" -p "$prompt" -n 48 --spec auto -k 4 --kv-type f32 \
  >"$tmp/cli.txt" 2>/dev/null
"$tmp/cmake-build/rewind_example" "$model" "$prompt" 48 "$draft" >"$tmp/example.txt"
"$tmp/pc_example" "$model" "$prompt" 48 "$draft" >"$tmp/pc_example.txt" 2>/dev/null
cmp "$tmp/cli.txt" "$tmp/example.txt"
cmp "$tmp/cli.txt" "$tmp/pc_example.txt"
echo "== the example's output equals rewind generate's ($(wc -c <"$tmp/cli.txt") bytes)"

# The installed Python module finds the installed librewind_c.so by itself (no REWIND_LIBRARY) and
# runs a batch whose requests equal their own decoding.
echo "== the installed Python module"
pymod=$(find "$prefix" -path '*/rewind/python/rewind.py' | head -n 1)
if [ -z "$pymod" ]; then
  echo "check.sh: rewind.py is not installed" >&2
  exit 1
fi
if command -v python3 >/dev/null; then
  env -u REWIND_LIBRARY PYTHONPATH="$(dirname "$pymod")" python3 - "$model" "$prefix" <<'PY'
import os
import sys

import rewind

model_path, prefix = sys.argv[1], sys.argv[2]
assert os.path.realpath(rewind._lib._name).startswith(os.path.realpath(prefix)), rewind._lib._name
model = rewind.Model(model_path)
batch = rewind.Batch(model)
prompts = {batch.add(p, max_tokens=16, source=s, stop_at_eog=False): p
           for p, s in [("def f(x):\n", None), ("import os\nimport sys\n", "ngram")]}
for r in batch.run_until_done():
    alone = rewind.Session(model)
    alone.append_text(prompts[r.id])
    assert alone.generate(16, stop_at_eog=False)[0] == r.text, f"request {r.id} differs from its own decoding"
print(f"rewind {rewind.version()} from {rewind._lib._name}: {len(prompts)} batched requests equal their own decoding")

# The C API's per-token callback (a stream stopped early), next-position logits and context
# options, through the installed module.
whole = rewind.Session(model, simd="scalar")
whole.append_text("def f(x):\n")
want_ids, _ = rewind.generate(whole.context, whole.cache, 12, stop_at_eog=False)
s = rewind.Session(model, numerics="exact")
s.append_text("def f(x):\n")
logits = list(s.next_logits())
assert max(range(len(logits)), key=logits.__getitem__) == want_ids[0], "next_logits' argmax is not the next token"
taken = []
for token in s.stream(12, text=False, stop_at_eog=False):
    taken.append(token)
    if len(taken) == 5:
        break
assert taken == list(want_ids[:5]), (taken, want_ids)
print("a stream stopped after 5 tokens, next_logits and context options: as the C API promises")
PY
else
  echo "(no python3: the module is installed but not run)"
fi

# docs/library.md shows this example verbatim: keep them equal.
doc=$here/../../docs/library.md
awk '/<!-- the file tests\/consumer\/rewind_example.cpp/ {on = 1; next} on && /^```cpp$/ {inside = 1; next}
     inside && /^```$/ {exit} inside {print}' "$doc" >"$tmp/doc_example.cpp"
if ! cmp -s "$tmp/doc_example.cpp" "$here/rewind_example.cpp"; then
  echo "check.sh: docs/library.md's example differs from tests/consumer/rewind_example.cpp" >&2
  diff "$tmp/doc_example.cpp" "$here/rewind_example.cpp" >&2 || true
  exit 1
fi
echo "== docs/library.md's example is tests/consumer/rewind_example.cpp"
