#!/usr/bin/env python3
# Writes apps/bench/workloads/repeat.jsonl: successive revisions of the same few prompts, so that
# later items' outputs repeat earlier items' (what a cache of earlier outputs, "suffix", exploits).
"""Usage: scripts/make_repeat_workload.py [SHARED_DIR] [OUT]

Takes the first BASES items of SHARED_DIR/workloads/free.jsonl (the first lines of held-out
CPython chunks; the text that follows is not in the prompt, so prompt lookup has little to copy)
and writes REVISIONS revisions of each, round-robin (every base once, then every base's second
revision, ...), so an item's near-twin is several items back:
  r0: the prompt as it is;
  r1: a comment line put in front of it (a user re-asking with a note);
  r2: the prompt without its last line (a user rewinding one line and regenerating).
Same JSON fields as the shared workloads: id, kind ("repeat"), prompt, references ([]), max_tokens.
"""
import json
import sys
from pathlib import Path

BASES = 4
REVISIONS = 3


def revise(prompt: str, r: int) -> str:
    if r == 0:
        return prompt
    if r == 1:
        return "# revised: same function, tidied comments\n" + prompt
    lines = prompt.splitlines(keepends=True)
    return "".join(lines[:-1]) if len(lines) > 1 else prompt


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else root.parent / "shared"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else root / "apps/bench/workloads/repeat.jsonl"
    with open(shared / "workloads/free.jsonl", encoding="utf-8") as f:
        bases = [json.loads(line) for line in f if line.strip()][:BASES]
    with open(out, "w", encoding="utf-8") as f:
        for r in range(REVISIONS):
            for b in bases:
                item = {"id": f"repeat-{b['id']}-r{r}", "kind": "repeat", "prompt": revise(b["prompt"], r),
                        "references": [], "max_tokens": b["max_tokens"]}
                f.write(json.dumps(item) + "\n")


if __name__ == "__main__":
    main()
