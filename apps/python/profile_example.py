#!/usr/bin/env python3
"""A guidance-style program (apps/examples/profile_example.cpp in Python): a character profile
whose template text is appended (one pass per piece, the prefix reused) and whose fields are
generated under constraints, once plainly and once speculating; prints forward passes against
tokens and checks that the two texts are the same.

    python3 profile_example.py [MODEL.gguf]   (default: the bundled pycode-4m-q8_0.gguf)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rewind  # noqa: E402

ITEMS = {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 14}, "minItems": 3, "maxItems": 3}
MAX_BATCH = 256


def profile(model, source=None):
    """The program's text and its totals: generated tokens and their passes, appended tokens and theirs."""
    s = rewind.Session(model, capacity=512, max_batch=MAX_BATCH)
    t = dict(tokens=0, passes=0, appended=0, append_passes=0, accepted=0, proposed=0, forced_accepted=0,
             forced_proposed=0)

    def append(text):
        before = len(s.cache)
        s.append(text)
        added = len(s.cache) - before  # run in passes of at most MAX_BATCH tokens
        t["appended"] += added
        t["append_passes"] += -(-added // MAX_BATCH)

    def gen(**kw):
        s.gen(source=source, k=8, **kw)
        r = s.last_gen
        t["tokens"] += r.n_tokens
        t["passes"] += r.stats.passes
        t["accepted"] += r.stats.accepted
        t["proposed"] += r.stats.proposed
        t["forced_accepted"] += r.forced_accepted
        t["forced_proposed"] += r.forced_proposed

    append('# A character profile for an RPG game, as a Python dict.\n'
           'profile = {\n    "id": "e1f491f7",\n    "description": "A quick and nimble fighter.",\n'
           '    "name": "')
    gen(regex="[A-Z][a-z]{2,11}", max_tokens=8)
    append('",\n    "age": ')
    gen(regex="[1-9][0-9]?", max_tokens=3)
    append(',\n    "class": "')
    gen(regex="(warrior|mage|rogue|ranger|cleric)", max_tokens=6)
    append('",\n    "mantra": "')
    gen(regex="[A-Za-z ,.!']{3,30}", max_tokens=12)
    append('",\n    "strength": ')
    gen(regex="[0-9]{1,3}", max_tokens=4)
    append(',\n    "items": ')
    gen(json_schema=ITEMS, max_tokens=40)
    append('\n}\nprint(profile["name"], "says:", ')
    gen(stop="\n", max_tokens=24)  # the stop string stays in the session, not in the capture
    return s.text(), t


def show(what, t):
    print(f"{what:<12} generated {t['tokens']} tokens in {t['passes']} forward passes "
          f"({t['tokens'] / max(t['passes'], 1):.2f} tokens/pass); template text: {t['appended']} tokens in "
          f"{t['append_passes']} passes; guesses accepted {t['accepted']} of {t['proposed']} "
          f"(forced text: {t['forced_accepted']} of {t['forced_proposed']})")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "assets", "pycode-4m-q8_0.gguf")
    model = rewind.Model(path)
    text, plain = profile(model)
    spec_text, spec = profile(model, source="ngram")  # prompt lookup; under a constraint, forced text too
    print(text)
    show("plain:", plain)
    show("speculative:", spec)
    print("same text:", "yes" if spec_text == text else "NO")
    return 0 if spec_text == text else 1


if __name__ == "__main__":
    sys.exit(main())
