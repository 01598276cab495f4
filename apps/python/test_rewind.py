#!/usr/bin/env python3
"""Tests of apps/python/rewind.py (ctest runs them with Debian's python3): speculative output
equals plain decoding, errors carry their status, a cache saved and loaded continues exactly,
batched requests each equal their own decoding, a token callback or a stream stops a generation
with the tokens so far equal to the unstopped one's prefix, next_logits' argmax is the next greedy
token, the context options (numerics, SIMD level, device) are taken or refused by name, and
docs/c-and-python.md's batch example is batch_example.py, apply_chat_template gives the publishers'
templates' text and the C API's ids, and a Chat's replies equal fresh generation with reuse; streams
and chat turns under a grammar, JSON Schema or regex equal generate's, plain or speculating."""
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# REWIND_TEST_INSTALLED=1: test the installed package (pip install apps/python), never this
# source tree, so that what CI checks is what users get.
INSTALLED = os.environ.get("REWIND_TEST_INSTALLED") == "1"
if INSTALLED:  # python puts a script's folder first on the path: take this one out
    sys.path = [p for p in sys.path if os.path.realpath(p or os.curdir) != os.path.realpath(HERE)]
else:
    sys.path.insert(0, HERE)
import rewind  # noqa: E402

if INSTALLED:
    assert not os.path.realpath(rewind.__file__).startswith(os.path.realpath(HERE) + os.sep), rewind.__file__
    assert "REWIND_LIBRARY" not in os.environ, "the installed package must load its own librewind_c.so"

SHARED = os.environ.get("REWIND_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
TARGET = os.path.join(SHARED, "models", "pycode-4m.gguf")
DRAFT = os.path.join(SHARED, "models", "pycode-600k.gguf")
CHAT_DIR = os.path.join(SHARED, "chat")
PROMPT = "import os\nimport sys\n\ndef main(argv):\n"
PROGRAM_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                   "size": {"type": "integer", "minimum": 0, "maximum": 999}},
                  "required": ["name", "size"], "additionalProperties": False}
try:
    import numpy  # noqa: F401 - Model.generate's arrays
    HAVE_NUMPY = True
except ImportError:
    HAVE_NUMPY = False


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

    def test_token_trees_and_the_cost_policy_are_lossless(self):
        plain, _ = self.session().generate(40, stop_at_eog=False)
        for source, kw in [("ngram", {"tree": 3}), ("suffix", {}), ("draft", {"draft": self.draft, "tree": 2}),
                           ("suffix", {"tree": 4, "k_policy": "cost"})]:
            with self.subTest(source=source, **{k: v for k, v in kw.items() if k != "draft"}):
                text, stats = self.session().generate(40, source=source, k=8, stop_at_eog=False, **kw)
                self.assertEqual(text, plain)
        with self.assertRaises(rewind.ArgumentError):
            self.session().generate(8, source="ngram", k_policy="sometimes")
        with self.assertRaises(rewind.ArgumentError):
            self.session().generate(8, source="ngram", tree=-1)

    def test_penalties_and_logprobs_equal_under_speculation(self):
        kw = dict(temperature=0.8, seed=4, stop_at_eog=False, frequency_penalty=0.5, presence_penalty=0.25,
                  logit_bias={self.model.tokenize("self", add_bos=False)[0]: 3.0}, logprobs=3)
        free, _ = self.session().generate(40, temperature=0.8, seed=4, stop_at_eog=False)
        for processed in (False, True):
            plain, st = self.session().generate(40, logprobs_processed=processed, **kw)
            self.assertNotEqual(plain, free)  # the penalties acted
            self.assertEqual(len(st.logprobs), 40)
            for lp, top in st.logprobs:
                self.assertLessEqual(lp, 0.0)
                self.assertEqual(len(top), 3)
                self.assertGreaterEqual(top[0][1], lp)
            text, spec = self.session().generate(40, source="draft", draft=self.draft, k=6, tree=2,
                                                 logprobs_processed=processed, **kw)
            self.assertEqual(text, plain)
            self.assertEqual(spec.logprobs, st.logprobs)  # the same floats, exactly
        with self.assertRaises(rewind.Error):
            self.session().generate(8, frequency_penalty=2.5)
        with self.assertRaises(rewind.Error):
            self.session().generate(8, logprobs=21)

    def program(self, **spec):
        """append, gen(regex), append, gen(json_schema), append, gen(stop): the captured texts and
        the session's ids."""
        s = rewind.Session(self.model, capacity=512)
        s.append("def scale(x):\n    return x * ")
        texts = [s.gen(regex="[0-9]{1,3}", max_tokens=8, **spec)]
        self.assertEqual(s.last_gen.stats.stop_reason, "end_of_generation")
        s.append("\n\nconfig = ")
        texts.append(s.gen(json_schema=PROGRAM_SCHEMA, max_tokens=40, **spec))
        json_gen = s.last_gen
        s.append("\n# ")
        texts.append(s.gen(stop="\n", max_tokens=30, **spec))
        return texts, s.cache.tokens(), json_gen

    def test_program_gives_the_same_text_with_every_source(self):
        plain, ids, json_gen = self.program()
        self.assertRegex(plain[0], r"^[0-9]{1,3}$")
        if json_gen.stats.stop_reason == "end_of_generation":
            doc = json.loads(plain[1])
            self.assertEqual(list(doc), ["name", "size"])
            self.assertLessEqual(len(doc["name"]), 12)
            self.assertTrue(isinstance(doc["size"], int) and 0 <= doc["size"] <= 999)
        self.assertNotIn("\n", plain[2])
        self.assertEqual(json_gen.stats.passes, json_gen.stats.emitted)
        for source, kw in [("forced", {}), ("ngram", {}), ("draft", {"draft": self.draft})]:
            with self.subTest(source=source):
                texts, spec_ids, spec_json = self.program(source=source, k=6, **kw)
                self.assertEqual(texts, plain)
                self.assertEqual(spec_ids, ids)
                self.assertGreater(spec_json.forced_accepted, 0)
                self.assertLess(spec_json.stats.passes, json_gen.stats.passes)
        # The schema as JSON text is the same constraint as the dict.
        s = rewind.Session(self.model, capacity=512)
        s.append("config = ")
        a = s.gen(json_schema=json.dumps(PROGRAM_SCHEMA), max_tokens=40)
        s2 = rewind.Session(self.model, capacity=512)
        s2.append("config = ")
        self.assertEqual(s2.gen(json_schema=PROGRAM_SCHEMA, max_tokens=40), a)

    def test_program_errors_change_nothing(self):
        s = rewind.Session(self.model, capacity=256)
        s.append("x = ")
        ids = s.cache.tokens()
        for kw, status, needle in [({"regex": "[0-9]", "grammar": 'root ::= "a"'}, "argument", "at most one"),
                                   ({"regex": "(ab"}, "argument", "regex"),
                                   ({"json_schema": {"type": "object", "minProperties": 1}}, "argument", "minProperties"),
                                   ({"json_schema": "{not json"}, "format", "json_schema"),
                                   ({"grammar": "root ::= ("}, "argument", "grammar")]:
            with self.subTest(**{k: str(v) for k, v in kw.items()}):
                with self.assertRaises(rewind.Error) as e:
                    s.gen(max_tokens=4, **kw)
                self.assertEqual(e.exception.status, status)
                self.assertIn(needle, str(e.exception))
                self.assertEqual(s.cache.tokens(), ids)
        with self.assertRaises(rewind.ArgumentError):
            s.gen(json_schema=3)
        with self.assertRaises(rewind.ArgumentError):
            s.gen(regex="[0-9]", json_whitespace="pretty")

    def test_generate_under_a_constraint(self):
        s = rewind.Session(self.model, capacity=256)
        s.append_text("config = ")
        out, st = rewind.generate(s.context, s.cache, 60, json_schema=PROGRAM_SCHEMA, logprobs=2,
                                  logprobs_processed=True)
        self.assertEqual(st.stop_reason, "end_of_generation")
        doc = json.loads(self.model.detokenize(out[:-1]))
        self.assertEqual(list(doc), ["name", "size"])
        # A batch request under the same schema, beside an unconstrained one, gives the same ids.
        batch = rewind.Batch(self.model)
        rid = batch.add("config = ", max_tokens=60, json_schema=PROGRAM_SCHEMA, source="ngram")
        batch.add(PROMPT, max_tokens=20)
        self.assertEqual({r.id: r.tokens for r in batch.run_until_done()}[rid], out)
        # The processed distribution is the masked one: where the schema forces a token, it is certain.
        forced = [lp for lp, top in st.logprobs if len(top) == 2 and top[1][1] == float("-inf")]
        self.assertGreater(len(forced), 0)
        self.assertTrue(all(lp == 0.0 for lp in forced))

    @unittest.skipUnless(HAVE_NUMPY, "numpy is not installed")
    def test_generate_hf_constraint_and_output_scores(self):
        import numpy as np
        ids = self.model.tokenize("config = ")
        kw = dict(max_new_tokens=40, json_schema=PROGRAM_SCHEMA, return_dict_in_generate=True, output_scores=True)
        plain = self.model.generate(ids, **kw)
        spec = self.model.generate(ids, prompt_lookup_num_tokens=4, **kw)
        np.testing.assert_array_equal(spec.sequences, plain.sequences)
        gen = plain.sequences[0, len(ids):].tolist()
        self.assertEqual(len(plain.scores), len(gen))
        for row, a, token, (lp, top) in zip(plain.scores, spec.scores, gen, plain.stats.logprobs):
            self.assertEqual(row.shape, (1, self.model.n_vocab))
            self.assertEqual(row.dtype, np.float32)
            self.assertTrue(np.array_equal(row, a))  # the same bits under speculation
            self.assertEqual(int(row[0].argmax()), token)  # greedy: the masked argmax
            self.assertEqual(row[0, token], np.float32(lp))
            self.assertEqual(int(np.isfinite(row[0]).sum()), len({t for t, v in top if v > float("-inf")} | {token}))
        text = self.model.detokenize(gen[:-1])
        self.assertEqual(list(json.loads(text)), ["name", "size"])
        self.assertIsNone(self.model.generate(ids, max_new_tokens=4, return_dict_in_generate=True).scores)

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

    def alone(self, prompt, max_tokens, **kw):
        """What a request generates decoding alone (plainly: speculation is lossless)."""
        s = rewind.Session(self.model)
        s.append_tokens(self.model.tokenize(prompt) if isinstance(prompt, str) else prompt)
        tokens, _ = rewind.generate(s.context, s.cache, max_tokens, **kw)
        return tokens

    def test_batch_requests_equal_their_own_decoding(self):
        batch = rewind.Batch(self.model, n_threads=2, prefill_chunk=16)
        reqs = [(PROMPT, 40, {}), ("class Parser:\n    def __init__(self):\n", 24, {"source": "ngram", "k": 4}),
                ("def f(x):\n    return x", 32, {"source": "ngram", "k": 6, "temperature": 0.8, "seed": 5}),
                (self.model.tokenize(PROMPT + "    parser = "), 20, {"source": "auto", "draft": self.draft})]
        want = {}
        for prompt, n, kw in reqs:
            rid = batch.add(prompt, max_tokens=n, stop_at_eog=False, **kw)
            plain_kw = {key: v for key, v in kw.items() if key in ("temperature", "seed")}
            want[rid] = self.alone(prompt, n, stop_at_eog=False, **plain_kw)
        self.assertEqual(len(batch), 4)
        seen = []
        for r in batch.run_until_done():
            self.assertEqual(r.state, "done")
            self.assertEqual(r.stop_reason, "max_tokens")
            self.assertEqual(r.tokens, want[r.id])
            self.assertEqual(r.stats.emitted, len(r.tokens))
            self.assertLessEqual(r.stats.accepted, r.stats.proposed)
            self.assertIsNone(r.error)
            seen.append(r.id)
        self.assertEqual(sorted(seen), sorted(want))
        self.assertEqual(len(batch), 0)
        self.assertEqual(batch.kv_bytes, 0)

    def test_batch_cancel_and_errors(self):
        batch = rewind.Batch(self.model)
        a = batch.add(PROMPT, max_tokens=40, stop_at_eog=False)
        b = batch.add("import re\n", max_tokens=30, source="ngram", stop_at_eog=False)
        for _ in range(6):
            batch.step()
        self.assertEqual(batch.result(a).state, "running")
        batch.cancel(a)
        batch.step()
        cancelled = batch.result(a)
        self.assertEqual((cancelled.state, cancelled.stop_reason), ("cancelled", "cancelled"))
        self.assertEqual(cancelled.tokens, self.alone(PROMPT, 40, stop_at_eog=False)[: len(cancelled.tokens)])
        with self.assertRaises(rewind.Error) as e:
            batch.cancel(a)  # already ended
        self.assertEqual(e.exception.status, "state")
        # Bad requests: their own errors, the batch unchanged.
        running, kv = len(batch), batch.kv_bytes
        for prompt, kw, status in [([1, self.model.n_vocab], {}, "argument"), ([], {}, "argument"),
                                   ([1] * (self.model.n_ctx + 1), {}, "capacity"),
                                   ("x", {"source": "telepathy"}, "argument"), ("x", {"source": "ngram", "k": 0}, "argument")]:
            with self.subTest(prompt=prompt[:3], kw=kw):
                with self.assertRaises(rewind.Error) as e:
                    batch.add(prompt, max_tokens=8, **kw)
                self.assertEqual(e.exception.status, status)
                self.assertEqual((len(batch), batch.kv_bytes), (running, kv))
        with self.assertRaises(rewind.Error) as e:
            batch.result(999)
        self.assertEqual(e.exception.status, "argument")
        done = {r.id: r for r in batch.run_until_done()}
        self.assertEqual(sorted(done), [a, b])
        self.assertEqual(done[b].tokens, self.alone("import re\n", 30, stop_at_eog=False))
        # A KV budget too small for any request: refused, nothing admitted.
        tiny = rewind.Batch(self.model, kv_budget_bytes=1)
        with self.assertRaises(rewind.Error) as e:
            tiny.add(PROMPT, max_tokens=8)
        self.assertEqual(e.exception.status, "capacity")
        self.assertEqual((len(tiny), tiny.kv_bytes), (0, 0))

    def plain_ids(self, n=40, **kw):
        s = self.session()
        ids, _ = rewind.generate(s.context, s.cache, n, stop_at_eog=False, **kw)
        return ids

    def test_on_token_sees_every_token_and_stops_early(self):
        plain = self.plain_ids()
        seen = []
        s = self.session()
        ids, stats = rewind.generate(s.context, s.cache, 40, stop_at_eog=False, on_token=seen.append)
        self.assertEqual((ids, seen, stats.stop_reason), (plain, plain, "max_tokens"))
        for source in (None, "ngram"):
            for n in (1, 7):
                with self.subTest(source=source, n=n):
                    s = self.session()
                    start = len(s.cache)
                    seen = []

                    def take(token):
                        seen.append(token)
                        return len(seen) < n

                    ids, stats = rewind.generate(s.context, s.cache, 40, source=source, k=4, stop_at_eog=False,
                                                 on_token=take)
                    self.assertEqual(ids, plain[:n])
                    self.assertEqual(seen, plain[:n])
                    self.assertEqual((stats.stop_reason, stats.emitted), ("cancelled", n))
                    self.assertEqual(s.cache.tokens()[start:], plain[:n])
                    more, _ = rewind.generate(s.context, s.cache, 40 - n, stop_at_eog=False)
                    self.assertEqual(more, plain[n:])  # continues as if never stopped
        # Session.generate passes on_token through and returns the text so far.
        one, _ = self.session().generate(1, stop_at_eog=False)
        text, stats = self.session().generate(40, stop_at_eog=False, on_token=lambda t: False)
        self.assertEqual((text, stats.emitted, stats.stop_reason), (one, 1, "cancelled"))

    def test_on_token_exception_stops_and_is_raised(self):
        plain = self.plain_ids()
        s = self.session()
        start = len(s.cache)
        seen = []

        def boom(token):
            seen.append(token)
            if len(seen) == 3:
                raise ValueError("enough")

        with self.assertRaises(ValueError):
            rewind.generate(s.context, s.cache, 40, stop_at_eog=False, on_token=boom)
        self.assertEqual(s.cache.tokens()[start:], plain[:3])

    def test_stream_equals_generate(self):
        plain = self.plain_ids()
        for source in (None, "ngram"):
            with self.subTest(source=source):
                s = self.session()
                st = rewind.stream(s.context, s.cache, 40, source=source, stop_at_eog=False)
                self.assertEqual(list(st), plain)
                self.assertEqual(st.tokens, plain)
                self.assertEqual((st.stats.emitted, st.stats.stop_reason), (40, "max_tokens"))
        # Text pieces join to what generate returns.
        text, _ = self.session().generate(40, stop_at_eog=False)
        s = self.session()
        with s.stream(40, stop_at_eog=False) as st:
            pieces = list(st)
        self.assertEqual("".join(pieces), text)
        self.assertEqual(st.text, text)
        self.assertTrue(all(pieces))

    def test_stream_break_stops_after_the_last_token_taken(self):
        plain = self.plain_ids()
        for source in (None, "ngram"):
            with self.subTest(source=source):
                s = self.session()
                start = len(s.cache)
                st = s.stream(40, text=False, source=source, stop_at_eog=False)
                taken = []
                for token in st:
                    taken.append(token)
                    self.assertEqual(len(s.cache), start)  # readable meanwhile
                    if len(taken) == 6:
                        break
                st.close()
                self.assertEqual(taken, plain[:6])
                self.assertEqual((st.stats.stop_reason, st.stats.emitted), ("cancelled", 6))
                self.assertEqual(s.cache.tokens()[start:], plain[:6])
        # Breaking without keeping the stream: it ends when dropped.
        s = self.session()
        start = len(s.cache)
        for i, _piece in enumerate(s.stream(40, stop_at_eog=False)):
            if i == 2:
                break
        self.assertEqual(s.cache.tokens()[start:], plain[: len(s.cache) - start])
        self.assertGreaterEqual(len(s.cache) - start, 3)
        # A stream left open is closed by the next call that runs the session; nothing is lost.
        s = self.session()
        start = len(s.cache)
        st = s.stream(40, text=False, stop_at_eog=False)
        first = [next(st), next(st)]
        rest, _ = s.generate(10, stop_at_eog=False)
        self.assertEqual(first, plain[:2])
        self.assertEqual(s.cache.tokens()[start:], plain[:12])
        self.assertEqual(st.stats.stop_reason, "cancelled")
        # A stream never iterated runs nothing.
        s = self.session()
        n = len(s.cache)
        s.stream(40).close()
        self.assertEqual(len(s.cache), n)

    def test_stream_under_a_constraint(self):
        """A constrained stream gives generate's ids, plain or speculating; text pieces join to
        Session.generate's text; a bad constraint raises before anything runs."""
        def fresh():
            s = rewind.Session(self.model, capacity=256)
            s.append_text("config = ")
            return s
        s = fresh()
        plain, st = rewind.generate(s.context, s.cache, 60, json_schema=PROGRAM_SCHEMA)
        self.assertEqual(st.stop_reason, "end_of_generation")
        for source in (None, "ngram", "forced"):
            with self.subTest(source=source):
                s = fresh()
                stream = rewind.stream(s.context, s.cache, 60, json_schema=PROGRAM_SCHEMA, source=source)
                self.assertEqual(list(stream), plain)
                self.assertEqual(stream.stats.stop_reason, "end_of_generation")
                if source is not None:
                    self.assertLess(stream.stats.passes, stream.stats.emitted)
        sampled = dict(json_schema=PROGRAM_SCHEMA, temperature=0.9, seed=5)
        s = fresh()
        want, _ = rewind.generate(s.context, s.cache, 60, **sampled)
        s = fresh()
        self.assertEqual(list(rewind.stream(s.context, s.cache, 60, source="forced", **sampled)), want)
        text, _ = fresh().generate(8, regex="[0-9]{1,3}")
        with fresh().stream(8, regex="[0-9]{1,3}", source="forced") as pieces:
            self.assertEqual("".join(pieces), text)
        self.assertTrue(text.isdigit(), text)
        penalised = dict(frequency_penalty=1.5, logit_bias={plain[0]: -100.0})
        want, _ = fresh().generate(20, stop_at_eog=False, **penalised)
        self.assertEqual("".join(fresh().stream(20, stop_at_eog=False, source="ngram", **penalised)), want)
        self.assertEqual(list(json.loads(self.model.detokenize(plain[:-1]))), ["name", "size"])
        for kw, status, needle in [({"regex": "(ab"}, "argument", "regex"),
                                   ({"regex": "[0-9]", "grammar": 'root ::= "a"'}, "argument", "at most one"),
                                   ({"json_schema": "{not json"}, "format", "json_schema")]:
            with self.subTest(kw=kw):
                s = fresh()
                n = len(s.cache)
                with self.assertRaises(rewind.Error) as e:
                    list(s.stream(8, **kw))
                self.assertEqual(e.exception.status, status)
                self.assertIn(needle, str(e.exception))
                self.assertEqual(len(s.cache), n)
        with self.assertRaises(rewind.ArgumentError):  # a type Python checks: at once
            fresh().stream(8, json_schema=3)

    @unittest.skipUnless(HAVE_NUMPY, "numpy is not installed")
    def test_model_stream_under_a_constraint(self):
        ids = self.model.tokenize("config = ")
        want = self.model.generate(ids, max_new_tokens=40, json_schema=PROGRAM_SCHEMA)[0].tolist()
        for kw in ({}, {"prompt_lookup_num_tokens": 4}):
            st = self.model.stream(ids, max_new_tokens=40, json_schema=PROGRAM_SCHEMA, **kw)
            self.assertEqual(list(st), want[len(ids):])
            self.assertEqual(st.sequences[0].tolist(), want)

    def test_stream_errors_raise_from_iteration(self):
        s = self.session()
        n = len(s.cache)
        with self.assertRaises(rewind.Error) as e:
            list(s.stream(8, source="telepathy"))
        self.assertEqual(e.exception.status, "argument")
        self.assertEqual(len(s.cache), n)
        s.generate(4)  # the session still works

    def test_next_logits_argmax_is_the_next_greedy_token(self):
        plain = self.plain_ids()
        s = self.session()
        before = s.cache.tokens()
        for use_numpy in (False, True):
            with self.subTest(numpy=use_numpy):
                saved = rewind._numpy
                if not use_numpy:
                    rewind._numpy = lambda: None
                elif saved() is None:
                    self.skipTest("numpy is not installed")
                try:
                    logits = s.next_logits()
                finally:
                    rewind._numpy = saved
                self.assertEqual(len(logits), self.model.n_vocab)
                values = list(logits)
                self.assertEqual(values.index(max(values)), plain[0])
                self.assertEqual(s.cache.tokens(), before)
        ids, _ = rewind.generate(s.context, s.cache, 40, stop_at_eog=False)
        self.assertEqual(ids, plain)
        with self.assertRaises(rewind.Error) as e:
            rewind.next_logits(s.context, rewind.Cache(self.model, 16))
        self.assertEqual(e.exception.status, "state")

    def test_apply_chat_template_matches_goldens(self):
        with open(os.path.join(CHAT_DIR, "templates", "qwen2_5.jinja")) as f:
            template = f.read()
        with open(os.path.join(CHAT_DIR, "goldens.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        records = [r for r in records if r["template"] == "qwen2_5" and r["error"] is None and not r["kwargs"]]
        self.assertGreater(len(records), 0)
        for r in records:
            with self.subTest(messages=r["messages"], add_generation_prompt=r["add_generation_prompt"]):
                kw = dict(add_generation_prompt=r["add_generation_prompt"], chat_template=template,
                          bos_token=r["bos_token"], eos_token=r["eos_token"])
                self.assertEqual(self.model.apply_chat_template(r["messages"], tokenize=False, **kw), r["text"])
                # The ids: the text's markers as control tokens; here they spell the same text.
                ids = self.model.apply_chat_template(r["messages"], **kw)
                self.assertEqual(ids, self._c_chat_tokenize(r["messages"], template, r["add_generation_prompt"]))
                bos = rewind._lib.rewind_model_bos(self.model._h)
                self.assertEqual(self.model.detokenize(ids[1:] if ids and ids[0] == bos else ids), r["text"])

    def _c_chat_tokenize(self, messages, template, add_generation_prompt):
        """rewind_chat_tokenize called directly, as a C program would."""
        arr = (rewind._ChatMessage * len(messages))(
            *[rewind._ChatMessage(m["role"].encode(), m["content"].encode()) for m in messages])
        opts = rewind._lib.rewind_chat_default_options()
        opts.chat_template = template.encode()
        opts.add_generation_prompt = int(add_generation_prompt)
        out = (rewind.ctypes.c_int32 * 4096)()
        n = rewind.ctypes.c_size_t(0)
        rewind._check(rewind._lib.rewind_chat_tokenize(self.model._h, rewind.ctypes.byref(opts), arr, len(messages),
                                                       out, 4096, rewind.ctypes.byref(n)))
        return list(out[: n.value])

    def test_apply_chat_template_semantics_and_refusals(self):
        conv = [{"role": "user", "content": "hi"}]
        # add_generation_prompt defaults to False, as in transformers.
        self.assertEqual(self.model.apply_chat_template(conv, tokenize=False, chat_template="chatml"),
                         "<|im_start|>user\nhi<|im_end|>\n")
        self.assertEqual(self.model.apply_chat_template(conv, add_generation_prompt=True, tokenize=False,
                                                        chat_template="chatml"),
                         "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        refused = [
            ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}], "unsupported",
             "tool_calls"),
            ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "unsupported", "list"),
            ([{"role": "user", "content": 3}], "unsupported", "int"),
            ([{"role": "robot", "content": "hi"}], "argument", "robot"),
            ([{"content": "hi"}], "argument", "role"),
            ([{"role": "user", "content": "a\0b"}], "argument", "NUL"),
            ([], "argument", ""),
        ]
        for messages, status, word in refused:
            for tokenize in (False, True):
                with self.subTest(messages=messages, tokenize=tokenize):
                    with self.assertRaises(rewind.Error) as e:
                        self.model.apply_chat_template(messages, tokenize=tokenize, chat_template="chatml")
                    self.assertEqual(e.exception.status, status)
                    self.assertIn(word, str(e.exception))
        with self.assertRaises(rewind.Error) as e:  # pycode-4m has no tokenizer.chat_template
            self.model.apply_chat_template(conv)
        self.assertEqual(e.exception.status, "unsupported")
        with self.assertRaises(rewind.Error) as e:
            rewind.Chat(self.model)
        self.assertEqual(e.exception.status, "unsupported")

    def _fresh_reply(self, conversation, max_tokens, **kw):
        ids = self.model.apply_chat_template(conversation, add_generation_prompt=True, chat_template="chatml")
        ctx, cache = rewind.Context(self.model), rewind.Cache(self.model, 512)
        rewind._check(rewind._lib.rewind_append(ctx._h, cache._h, *rewind._ids(ids)))
        out, stats = rewind.generate(ctx, cache, max_tokens, **kw)
        if stats.stop_reason == "end_of_generation":
            out = out[:-1]
        return self.model.detokenize(out), len(ids)

    def test_chat_turns_reuse_and_equal_fresh_generation(self):
        chat = rewind.Chat(self.model, system="You write Python.", chat_template="chatml", capacity=512)
        spec_chat = rewind.Chat(self.model, system="You write Python.", chat_template="chatml", capacity=512)
        conv = [{"role": "system", "content": "You write Python."}]
        for i, text in enumerate(["def add(a, b):", "import os"]):
            reply = chat.say(text, max_tokens=12)
            turn = chat.last_turn
            conv.append({"role": "user", "content": text})
            fresh, n_prompt = self._fresh_reply(conv, 12)
            self.assertEqual(reply, fresh)
            self.assertEqual(turn.prompt_tokens, n_prompt)
            self.assertEqual(turn.reused_tokens + turn.run_tokens, turn.prompt_tokens)
            if i == 0:
                self.assertEqual(turn.reused_tokens, 0)
            else:
                self.assertGreater(turn.reused_tokens, 0)
            self.assertEqual(spec_chat.say(text, max_tokens=12, source="ngram", k=4), reply)
            conv.append({"role": "assistant", "content": reply})
            self.assertEqual(chat.messages, conv)
        # on_token sees the reply's ids and can stop it.
        seen = []
        chat.say("class Point:", max_tokens=12, on_token=lambda t: seen.append(t) or len(seen) < 3)
        self.assertEqual(len(seen), 3)
        self.assertEqual(chat.last_turn.stats.stop_reason, "cancelled")
        # A conversation that outgrows the cache: capacity, nothing recorded; reset starts over.
        small = rewind.Chat(self.model, chat_template="chatml", capacity=24)
        with self.assertRaises(rewind.Error) as e:
            small.say(PROMPT * 4, max_tokens=4)
        self.assertEqual(e.exception.status, "capacity")
        self.assertEqual(small.messages, [])
        chat.reset()
        self.assertEqual(chat.messages, conv[:1])
        self.assertEqual(chat.say("def add(a, b):", max_tokens=12), conv[2]["content"])
        self.assertEqual(chat.last_turn.reused_tokens, 0)
        with self.assertRaises(rewind.Error) as e:
            chat.say(["not", "text"])
        self.assertEqual(e.exception.status, "unsupported")

    def test_chat_under_a_constraint(self):
        """Each constrained reply equals fresh generation under the constraint, plainly and
        speculating, and is in its language; a bad constraint leaves the conversation as it was."""
        chats = [rewind.Chat(self.model, system="You answer in JSON.", chat_template="chatml", capacity=512)
                 for _ in range(3)]
        conv = [{"role": "system", "content": "You answer in JSON."}]
        turns = [("describe the config", {"json_schema": PROGRAM_SCHEMA}), ("a number", {"regex": "[0-9]{1,3}"})]
        for text, constraint in turns:
            reply = chats[0].say(text, max_tokens=60, **constraint)
            self.assertEqual(chats[0].last_turn.stats.stop_reason, "end_of_generation")
            conv.append({"role": "user", "content": text})
            self.assertEqual(reply, self._fresh_reply(conv, 60, **constraint)[0])
            for chat, source in zip(chats[1:], ("forced", "ngram")):
                self.assertEqual(chat.say(text, max_tokens=60, source=source, k=6, **constraint), reply)
            conv.append({"role": "assistant", "content": reply})
        self.assertEqual(list(json.loads(conv[2]["content"])), ["name", "size"])
        self.assertTrue(conv[4]["content"].isdigit())
        self.assertLess(chats[1].last_turn.stats.passes, 60)
        for kw, status in [({"regex": "(ab"}, "argument"), ({"json_schema": "{not json"}, "format"),
                           ({"grammar": "root ::= ("}, "argument"), ({"regex": "1", "json_schema": {}}, "argument")]:
            with self.assertRaises(rewind.Error) as e:
                chats[0].say("again", max_tokens=8, **kw)
            self.assertEqual(e.exception.status, status)
            self.assertEqual(chats[0].messages, conv)
        self.assertEqual(chats[0].say("again", max_tokens=8, regex="[a-z]+", source="forced"),
                         chats[1].say("again", max_tokens=8, regex="[a-z]+"))
        # Seeded sampling: the same reply with and without speculation too.
        sampled = dict(max_tokens=60, json_schema=PROGRAM_SCHEMA, temperature=0.9, seed=11)
        reply = chats[0].say("sampled", **sampled)
        self.assertEqual(chats[1].say("sampled", source="ngram", k=4, **sampled), reply)  # same history
        self.assertEqual(list(json.loads(reply)), ["name", "size"])

    def test_context_options(self):
        plain = self.plain_ids(8)
        for kw in ({"numerics": "exact", "simd": "scalar"}, {"numerics": "llamacpp", "max_batch": 512},
                   {"device": "cpu", "n_threads": 2}):
            with self.subTest(**kw):
                s = rewind.Session(self.model, capacity=256, **kw)
                s.append_text(PROMPT)
                logits = list(s.next_logits())
                ids, _ = rewind.generate(s.context, s.cache, 8, stop_at_eog=False)
                self.assertEqual(ids[0], logits.index(max(logits)))
                if kw.get("numerics") == "exact":
                    self.assertEqual(ids, plain)
        for kw, status in [({"simd": "sse9"}, "argument"), ({"numerics": "fast"}, "argument"),
                           ({"device": "tpu"}, "argument"), ({"device": "cuda:999"}, "unsupported")]:
            with self.subTest(**kw):
                with self.assertRaises(rewind.Error) as e:
                    rewind.Context(self.model, **kw)
                self.assertEqual(e.exception.status, status)
                self.assertIn(list(kw.values())[0], str(e.exception))
        batch = rewind.Batch(self.model, simd="scalar")
        rid = batch.add(PROMPT, max_tokens=8, stop_at_eog=False)
        self.assertEqual([r.tokens for r in batch.run_until_done()], [self.alone(PROMPT, 8, stop_at_eog=False)])
        self.assertEqual(rid, 1)
        with self.assertRaises(rewind.Error) as e:
            rewind.Batch(self.model, numerics="fast")
        self.assertEqual(e.exception.status, "argument")

    def test_docs_batch_example_is_batch_example_py(self):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "docs", "c-and-python.md")) as f:
            doc = f.read()
        marker = "<!-- the file apps/python/batch_example.py"
        self.assertIn(marker, doc)
        block = doc[doc.index(marker):]
        block = block[block.index("```python\n") + len("```python\n"):]
        block = block[: block.index("```\n")]
        with open(os.path.join(here, "batch_example.py")) as f:
            self.assertEqual(block, f.read(), "docs/c-and-python.md's batch example differs from apps/python/batch_example.py")


if __name__ == "__main__":
    unittest.main()
