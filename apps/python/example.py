#!/usr/bin/env python3
"""rewind from Python: speculative generation (the `auto` source) on a GGUF model, its output
checked against plain decoding, a second round in the same session reusing the prefix, a streamed
third round stopped early, and the logits of the next position.

    python3 apps/python/example.py [MODEL.gguf]   (default: assets/pycode-4m-q8_0.gguf)

Set REWIND_LIBRARY to librewind_c.so if it is not beside rewind.py or in an installed prefix.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rewind  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "assets", "pycode-4m-q8_0.gguf")
model = rewind.Model(path)
print(f"rewind {rewind.version()}: {path} ({model.n_vocab} tokens, context {model.n_ctx})")

prompt = "def parse_args(argv):\n    parser = argparse.ArgumentParser()\n"
session = rewind.Session(model, capacity=512)
session.append_text(prompt)
text, stats = session.generate(64, source="auto", k=4, stop_at_eog=False)
print(prompt + text)
print(f"auto: {stats.emitted} tokens in {stats.passes} passes ({stats.tokens_per_pass:.2f} per pass), "
      f"{stats.accepted}/{stats.proposed} guesses accepted")

# Lossless: plain decoding of the same prompt gives the same text.
plain = rewind.Session(model, capacity=512)
plain.append_text(prompt)
plain_text, plain_stats = plain.generate(64, stop_at_eog=False)
assert plain_text == text, "speculative output differs from plain decoding"
print(f"plain: {plain_stats.passes} passes; same text: yes")

# Append more text and generate again: only the new tokens are run.
session.append_text("\n\ndef main():\n")
more, stats = session.generate(32, source="ngram", k=4, stop_at_eog=False)
print(more)
print(f"ngram: {stats.emitted} tokens in {stats.passes} passes; the session holds {len(session.cache)} tokens")

# Stream: each piece of text as its token is decided; breaking out stops the generation, and the
# tokens taken so far stay in the session.
session.append_text("\n\nclass Config:\n")
n_before = len(session.cache)
pieces = []
for piece in session.stream(64, source="ngram", k=4, stop_at_eog=False):
    pieces.append(piece)
    if "\n" in piece and len(pieces) > 8:
        break
print("".join(pieces))
print(f"stream: stopped after {len(pieces)} pieces ({len(session.cache) - n_before} tokens, kept in the session)")

# The logits the next token is chosen from (numpy array if numpy is installed, else a list).
logits = list(session.next_logits())
best = logits.index(max(logits))
print(f"next greedy token: {best} {model.detokenize([best])!r}")
