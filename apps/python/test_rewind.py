#!/usr/bin/env python3
"""Tests of apps/python/rewind.py (ctest runs them with Debian's python3): speculative output
equals plain decoding, errors carry their status, a cache saved and loaded continues exactly."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rewind  # noqa: E402

SHARED = os.environ.get("REWIND_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
TARGET = os.path.join(SHARED, "models", "pycode-4m.gguf")
DRAFT = os.path.join(SHARED, "models", "pycode-600k.gguf")
PROMPT = "import os\nimport sys\n\ndef main(argv):\n"


class RewindTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = rewind.Model(TARGET)
        cls.draft = rewind.Model(DRAFT)

    def session(self):
        s = rewind.Session(self.model, capacity=256)
        s.append_text(PROMPT)
        return s

    def test_tokenize_round_trip(self):
        ids = self.model.tokenize(PROMPT)
        self.assertGreater(len(ids), 5)
        self.assertEqual(self.model.detokenize(self.model.tokenize(PROMPT, add_bos=False)), PROMPT)

    def test_every_source_is_lossless(self):
        plain, _ = self.session().generate(40, stop_at_eog=False)
        for source, kw in [("ngram", {}), ("ref", {"references": [PROMPT + "    return 0\n"]}),
                           ("draft", {"draft": self.draft}), ("auto", {"draft": self.draft})]:
            with self.subTest(source=source):
                text, stats = self.session().generate(40, source=source, k=4, stop_at_eog=False, **kw)
                self.assertEqual(text, plain)
                self.assertEqual(stats.emitted, 40)
                self.assertLessEqual(stats.passes, 40)
                self.assertLessEqual(stats.accepted, stats.proposed)

    def test_errors_carry_status(self):
        with self.assertRaises(rewind.Error) as e:
            rewind.Model("/nonexistent/model.gguf")
        self.assertEqual(e.exception.status, "io")
        self.assertIn("/nonexistent/model.gguf", str(e.exception))
        s = self.session()
        n = len(s.cache)
        with self.assertRaises(rewind.Error) as e:
            s.append_tokens([self.model.n_vocab])
        self.assertEqual(e.exception.status, "argument")
        with self.assertRaises(rewind.Error) as e:
            s.generate(8, source="telepathy")
        self.assertEqual(e.exception.status, "argument")
        self.assertEqual(len(s.cache), n)
        other = rewind.Cache(self.draft, 64)
        with self.assertRaises(rewind.Error) as e:
            rewind.generate(s.context, other, 4)  # a cache of another model
        self.assertEqual(e.exception.status, "state")

    def test_save_load_truncate(self):
        s = self.session()
        s.generate(24, stop_at_eog=False)
        whole = s.text()
        n = len(s.cache)
        s.cache.truncate(n - 12)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.kv")
            s.cache.save(path)
            loaded = rewind.Cache.load(self.model, path, capacity=256)
        self.assertEqual(loaded.tokens(), s.cache.tokens())
        ids, _ = rewind.generate(s.context, loaded, 12, stop_at_eog=False)
        self.assertEqual(loaded.tokens()[-12:], ids)
        self.assertEqual(self.model.detokenize(loaded.tokens()), whole)  # as if never truncated


if __name__ == "__main__":
    unittest.main()
