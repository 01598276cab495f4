#!/usr/bin/env python3
"""rewind from Python: continuous batching. Three requests decode together, one forward pass a
step, each with its own guess source; each one's text equals its own plain decoding.

    python3 apps/python/batch_example.py [MODEL.gguf]   (default: assets/pycode-4m-q8_0.gguf)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rewind  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
model = rewind.Model(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "../../assets/pycode-4m-q8_0.gguf"))
batch = rewind.Batch(model, n_threads=2)
prompts = {}
for prompt, source in [("def parse_args(argv):\n", None), ("class Stack:\n    def push(self, x):\n", "ngram"),
                       ("import os\nimport sys\n", "ngram")]:
    prompts[batch.add(prompt, max_tokens=48, source=source, k=4, stop_at_eog=False)] = prompt
for r in batch.run_until_done():  # each request as it ends
    print(f"request {r.id} ({r.stop_reason}): {r.stats.emitted} tokens in {r.stats.passes} steps")
    print(prompts[r.id] + r.text)
    alone = rewind.Session(model)  # lossless: what it generates decoding alone
    alone.append_text(prompts[r.id])
    assert alone.generate(48, stop_at_eog=False)[0] == r.text
