#!/usr/bin/env python3
"""Tests of rewind's Hugging Face side (numpy, past_key_values, generate() with transformers'
names), with Debian's python3 and numpy:

- a numpy reference forward pass in Hugging Face's convention (hf_reference.py: weights read from
  the GGUF file and un-permuted, rotate-half rope) computes the past_key_values of a prompt;
  imported into rewind, the next-token logits equal rewind's own prefill's within 1e-4 and the
  greedy continuation is the same, for a llama and a qwen2 file (the shared ones, and F16 files
  made for the test by `rewind make-dummy` when REWIND_CLI names the CLI);
- the same reference's sparse MoE block on make-dummy's qwen3moe and Mixtral-style files: rewind's
  logits within 1e-4 and the same greedy continuation (when REWIND_CLI is set);
- export -> import -> export gives back the same arrays and logits on every shared architecture,
  F32 and F16;
- every bad input raises a rewind.Error subclass naming what, the session unchanged;
- Model.generate() takes transformers' arguments, runs only what past_key_values does not cover,
  and gives the CLI's output for the same settings (when REWIND_CLI is set).

REWIND_TEST_INSTALLED=1 tests the installed package instead of the source tree (as test_rewind.py).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALLED = os.environ.get("REWIND_TEST_INSTALLED") == "1"
if INSTALLED:  # python puts a script's folder first on the path: take this one out for rewind
    sys.path = [p for p in sys.path if os.path.realpath(p or os.curdir) != os.path.realpath(HERE)]
else:
    sys.path.insert(0, HERE)
import rewind  # noqa: E402

if INSTALLED:
    assert not os.path.realpath(rewind.__file__).startswith(os.path.realpath(HERE) + os.sep), rewind.__file__
    sys.path.append(HERE)  # the test helpers only
import hf_reference  # noqa: E402

SHARED = os.environ.get("REWIND_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
MODELS = os.path.join(SHARED, "models")
LLAMA = os.path.join(MODELS, "pycode-4m.gguf")
QWEN2 = os.path.join(MODELS, "arch-qwen2.gguf")
DRAFT = os.path.join(MODELS, "pycode-600k.gguf")
ARCH_FILES = [LLAMA] + [os.path.join(MODELS, f"arch-{a}.gguf") for a in ("llama3", "qwen2", "qwen3", "phi3", "gemma3")]
CLI = os.environ.get("REWIND_CLI")
# The CLI runs without a sanitizer runtime preloaded into python3 (an ASan executable has its own).
CLI_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
PROMPT = "import os\nimport sys\n\ndef main(argv):\n"


def as_f32(pkv):
    return [(k.astype(np.float32), v.astype(np.float32)) for k, v in pkv]


class ReferenceTest(unittest.TestCase):
    """The Hugging Face-layout import against the numpy reference."""

    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.files = [("llama", LLAMA), ("qwen2", QWEN2)]
        if CLI:  # F16 files made for this test, of both conventions
            cls.tmp = tempfile.TemporaryDirectory()
            for arch in ("llama", "qwen2"):
                out = os.path.join(cls.tmp.name, f"dummy-{arch}.gguf")
                subprocess.run([CLI, "make-dummy", "--shape", "tiny", "--arch", arch, "--type", "f16", "-t", "1",
                                "-o", out], check=True, capture_output=True, env=CLI_ENV)
                cls.files.append((f"{arch} (make-dummy f16)", out))

    @classmethod
    def tearDownClass(cls):
        if cls.tmp is not None:
            cls.tmp.cleanup()

    def test_reference_past_key_values_continue_as_rewinds_own_prefill(self):
        for name, path in self.files:
            with self.subTest(model=name):
                model = rewind.Model(path)
                ref = hf_reference.Reference(path)
                ids = model.tokenize(PROMPT)
                _, pkv = ref.forward(ids[:-1])  # the cache of all but the newest token
                pkv = as_f32(pkv)
                self.assertEqual(model.kv_shape.hf_keys_permuted, name.startswith("llama"))

                own = rewind.Session(model, capacity=128)
                own.append_tokens(ids)
                own_logits = own.next_logits()
                imported = rewind.Session(model, capacity=128)
                imported.load_past_key_values(pkv, ids)
                self.assertEqual(imported.cache.tokens(), ids)
                self.assertEqual(imported.cache.n_positions, len(ids) - 1)
                logits = imported.next_logits()
                self.assertLess(float(np.abs(logits - own_logits).max()), 1e-4)
                # The reference itself agrees with rewind (it is the Hugging Face forward pass).
                self.assertLess(float(np.abs(ref.forward(ids)[0][-1] - own_logits).max()), 1e-4)

                own_text, _ = own.generate(24, stop_at_eog=False)
                text, _ = imported.generate(24, stop_at_eog=False)
                self.assertEqual(imported.cache.tokens(), own.cache.tokens())
                self.assertEqual(text, own_text)

                # The same through generate(): input_ids the whole prompt, the cache its first tokens.
                a = model.generate(np.array([ids]), past_key_values=pkv, max_new_tokens=24, stop_at_eog=False)
                b = model.generate(np.array([ids]), max_new_tokens=24, stop_at_eog=False)
                np.testing.assert_array_equal(a, b)
                np.testing.assert_array_equal(a[0], own.cache.tokens())

                # F16 arrays import as well (rounded): the continuation is still close.
                half = [(k.astype(np.float16), v.astype(np.float16)) for k, v in pkv]
                c16 = rewind.Cache.from_past_key_values(model, half, ids, capacity=128)
                l16 = rewind.next_logits(rewind.Context(model), c16)
                self.assertLess(float(np.abs(l16 - own_logits).max()), 0.05)

                if name.startswith("llama"):
                    # Keys left in the file's permuted layout would give other logits: the
                    # mapping is what makes the import right.
                    hd = model.kv_shape.head_dim
                    order = np.arange(hd).reshape(2, hd // 2).T.reshape(hd)  # HF index of rewind's 2i+a
                    wrong = [(np.ascontiguousarray(k[..., order]), v) for k, v in pkv]
                    cw = rewind.Cache.from_past_key_values(model, wrong, ids, capacity=128)
                    lw = rewind.next_logits(rewind.Context(model), cw)
                    self.assertGreater(float(np.abs(lw - own_logits).max()), 1e-3)

    def test_cache_covering_every_input_token_holds_the_last_one_back(self):
        model = rewind.Model(QWEN2)
        ids = model.tokenize(PROMPT)
        _, pkv = hf_reference.Reference(QWEN2).forward(ids)  # all of ids
        s = rewind.Session(model, capacity=128)
        s.load_past_key_values(as_f32(pkv), ids)
        self.assertEqual(s.cache.n_positions, len(ids) - 1)
        own = rewind.Session(model, capacity=128)
        own.append_tokens(ids)
        self.assertLess(float(np.abs(s.next_logits() - own.next_logits()).max()), 1e-4)
        a = model.generate([ids], past_key_values=as_f32(pkv), max_new_tokens=12, stop_at_eog=False)
        np.testing.assert_array_equal(a, model.generate([ids], max_new_tokens=12, stop_at_eog=False))


@unittest.skipUnless(CLI, "REWIND_CLI (the rewind executable) is not set: it makes the expert files")
class MoeReferenceTest(unittest.TestCase):
    """Mixture-of-experts files (`rewind make-dummy`: qwen3moe F32, Mixtral-style llama F16) against
    the numpy reference's sparse MoE block: the logits of every prompt position within 1e-4, and
    the same greedy continuation."""

    def test_expert_models_match_the_reference(self):
        with tempfile.TemporaryDirectory() as tmp:
            for shape, ftype in (("qwen3-moe-tiny", "f32"), ("mixtral-tiny", "f16")):
                with self.subTest(shape=shape):
                    path = os.path.join(tmp, f"{shape}.gguf")
                    subprocess.run([CLI, "make-dummy", "--shape", shape, "--type", ftype, "-t", "1", "--seed", "3",
                                    "-o", path], check=True, capture_output=True, env=CLI_ENV)
                    model = rewind.Model(path)
                    ref = hf_reference.Reference(path)
                    self.assertGreater(ref.n_expert, ref.n_expert_used)
                    ids = model.tokenize(PROMPT)
                    own = rewind.Session(model, capacity=128)
                    own.append_tokens(ids)
                    want, _ = ref.forward(ids)
                    self.assertLess(float(np.abs(own.next_logits() - want[-1]).max()), 1e-4)
                    own.generate(12, stop_at_eog=False)
                    got = own.cache.tokens()
                    seq = list(ids)
                    for _ in range(12):
                        seq.append(int(np.argmax(ref.forward(seq)[0][-1])))
                    self.assertEqual(got[len(ids):], seq[len(ids):])


class RoundTripTest(unittest.TestCase):
    def test_export_import_export_on_every_architecture(self):
        for path in ARCH_FILES:
            with self.subTest(model=os.path.basename(path)):
                model = rewind.Model(path)
                shape = model.kv_shape
                s = rewind.Session(model, capacity=96)
                s.append_text(PROMPT)
                s.generate(8, stop_at_eog=False)
                ids = s.cache.tokens()
                pkv = s.past_key_values()
                self.assertEqual(len(pkv), shape.n_layer)
                for k, v in pkv:
                    self.assertEqual(k.shape, (1, shape.n_head_kv, len(ids) - 1, shape.head_dim))
                    self.assertEqual(v.shape, k.shape)
                    self.assertEqual(k.dtype, np.float32)
                back = rewind.Cache.from_past_key_values(model, pkv, ids, capacity=96)
                self.assertEqual(back.tokens(), ids)
                for (k0, v0), (k1, v1) in zip(pkv, back.to_past_key_values()):
                    np.testing.assert_array_equal(k0, k1)
                    np.testing.assert_array_equal(v0, v1)
                ctx = rewind.Context(model)
                np.testing.assert_array_equal(rewind.next_logits(ctx, back), s.next_logits())
                # F16: half arrays into an F32 or an F16 cache come back as the same halves.
                half = s.past_key_values("float16")
                self.assertEqual(half[0][0].dtype, np.float16)
                for kv_f16 in (False, True):
                    c = rewind.Cache.from_past_key_values(model, half, ids, capacity=96, kv_f16=kv_f16)
                    for (k0, v0), (k1, v1) in zip(half, c.to_past_key_values("float16")):
                        np.testing.assert_array_equal(k0, k1)
                        np.testing.assert_array_equal(v0, v1)
                # A generation's own past_key_values is the cache of sequences[:, :-1].
                out = model.generate(np.array([ids]), max_new_tokens=4, stop_at_eog=False,
                                     return_dict_in_generate=True)
                self.assertEqual(out.past_key_values[0][0].shape[2], out.sequences.shape[1] - 1)

    def test_empty_cache_round_trip(self):
        model = rewind.Model(QWEN2)
        shape = model.kv_shape
        empty = [(np.zeros((1, shape.n_head_kv, 0, shape.head_dim), np.float32),) * 2 for _ in range(shape.n_layer)]
        c = rewind.Cache.from_past_key_values(model, empty, [])
        self.assertEqual(len(c), 0)
        self.assertEqual(c.to_past_key_values()[0][0].shape, (1, shape.n_head_kv, 0, shape.head_dim))
        c = rewind.Cache.from_past_key_values(model, empty, [1])
        self.assertEqual(len(c), 1)


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = rewind.Model(LLAMA)
        cls.ids = cls.model.tokenize(PROMPT)
        s = rewind.Session(cls.model, capacity=128)
        s.append_tokens(cls.ids)
        cls.pkv = s.past_key_values()

    def refused(self, error, pkv, tokens=None, words=()):
        s = rewind.Session(self.model, capacity=128)
        s.append_text("x = 1\n")
        before_ids, before_logits = s.cache.tokens(), s.next_logits()
        with self.assertRaises(error) as e:
            s.load_past_key_values(pkv, self.ids if tokens is None else tokens)
        self.assertIsInstance(e.exception, rewind.Error)
        self.assertEqual(e.exception.status, error.status)
        self.assertEqual(e.exception.code, error.code)
        for w in words:
            self.assertIn(w, str(e.exception))
        # The session is unchanged.
        self.assertEqual(s.cache.tokens(), before_ids)
        np.testing.assert_array_equal(s.next_logits(), before_logits)
        return e.exception

    def test_refusals_name_what_and_change_nothing(self):
        pkv, n = list(self.pkv), len(self.ids) - 1
        self.refused(rewind.ShapeError, pkv[:-1], words=("layer count 5", "has 6"))
        self.refused(rewind.ShapeError, pkv + pkv[:1], words=("layer count 7",))
        self.refused(rewind.ShapeError, [(k[:, :1].copy(), v[:, :1].copy()) for k, v in pkv], words=("KV head count 1",))
        self.refused(rewind.ShapeError, [(k[..., :16].copy(), v[..., :16].copy()) for k, v in pkv],
                     words=("head dimension 16",))
        self.refused(rewind.ShapeError, [(np.concatenate([k, k]), np.concatenate([v, v])) for k, v in pkv],
                     words=("batch 2",))
        self.refused(rewind.ShapeError, [(k[0], v[0]) for k, v in pkv], words=("shape",))
        mixed = [(k, v[:, :, :-1].copy()) for k, v in pkv]
        self.refused(rewind.ShapeError, mixed, words=("value",))
        self.refused(rewind.ArgumentError, [(k.astype(np.float64), v.astype(np.float64)) for k, v in pkv],
                     words=("float64",))
        self.refused(rewind.ArgumentError, [(k.astype(np.int32), v) for k, v in pkv], words=("int32",))
        self.refused(rewind.ArgumentError, [(k, v.astype(np.float16)) for k, v in pkv], words=("float16",))
        self.refused(rewind.ArgumentError, [(k.astype(">f4"), v.astype(">f4")) for k, v in pkv], words=("dtype",))
        # Non-contiguous and wrongly strided views of the right shape.
        wide = [(np.repeat(k, 2, axis=3)[..., ::2], v) for k, v in pkv]
        self.assertEqual(wide[0][0].shape, pkv[0][0].shape)
        self.refused(rewind.ArgumentError, wide, words=("strides", "past_key_values[0] key"))
        swapped = [(np.ascontiguousarray(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3), v) for k, v in pkv]
        self.refused(rewind.ArgumentError, swapped, words=("C-contiguous",))
        self.refused(rewind.ArgumentError, [(k, v, v) for k, v in pkv], words=("pair",))
        self.refused(rewind.ArgumentError, "not a cache")
        self.refused(rewind.ArgumentError, [(k.tolist(), v) for k, v in pkv], words=("list",))
        bad = [(k.copy(), v.copy()) for k, v in pkv]
        bad[3][1][0, 1, 2, 3] = np.nan
        self.refused(rewind.ArgumentError, bad, words=("non-finite",))
        # The token count: the positions' ids, with or without the next one.
        self.refused(rewind.StateError, pkv, tokens=self.ids + [5], words=(f"{n + 2} token ids", f"{n} positions"))
        self.refused(rewind.StateError, pkv, tokens=self.ids[:-2])
        self.refused(rewind.ArgumentError, pkv, tokens=self.ids[:-1] + [self.model.n_vocab], words=("vocabulary",))
        self.refused(rewind.ArgumentError, pkv, tokens=[0.5] * len(self.ids), words=("float",))

    def test_a_cache_longer_than_the_context(self):
        shape, n_ctx = self.model.kv_shape, self.model.n_ctx
        big = [(np.zeros((1, shape.n_head_kv, n_ctx + 1, shape.head_dim), np.float32),) * 2
               for _ in range(shape.n_layer)]
        e = self.refused(rewind.CapacityError, big, tokens=[1] * (n_ctx + 2))
        self.assertIn(str(n_ctx), str(e))
        with self.assertRaises(rewind.CapacityError):
            rewind.Cache.from_past_key_values(self.model, self.pkv, self.ids, capacity=4)

    def test_a_closed_model(self):
        model = rewind.Model(LLAMA)
        s = rewind.Session(model, capacity=64)
        s.append_text(PROMPT)
        model.close()
        self.assertTrue(model.closed)
        for call in (lambda: model.n_vocab, lambda: model.kv_shape, lambda: model.tokenize("x"),
                     lambda: model.generate([self.ids], max_new_tokens=2),
                     lambda: rewind.Cache.from_past_key_values(model, self.pkv, self.ids),
                     lambda: rewind.Session(model)):
            with self.assertRaises(rewind.StateError) as e:
                call()
            self.assertIn("closed", str(e.exception))
        with self.assertRaises(rewind.StateError):
            s.past_key_values()  # needs the model's shape
        # What was made before close() still runs: the C side keeps the model alive.
        rewind.generate(s.context, s.cache, 4, stop_at_eog=False)
        self.assertEqual(len(s.cache.tokens()), len(self.ids) + 4)
        model.close()  # twice is fine

    def test_generate_argument_errors(self):
        m, ids = self.model, np.array([self.ids])
        with self.assertRaises(rewind.ArgumentError) as e:
            m.generate(ids, max_new_tokens=2, num_beam=2)  # a typo, as transformers refuses it
        self.assertIn("num_beam", str(e.exception))
        with self.assertRaises(rewind.UnsupportedError):
            m.generate(ids, max_new_tokens=2, num_beams=2)
        with self.assertRaises(rewind.UnsupportedError):
            m.generate(ids, max_new_tokens=2, attention_mask=np.array([[0] + [1] * (ids.shape[1] - 1)]))
        m.generate(ids, max_new_tokens=2, attention_mask=np.ones_like(ids), num_beams=1, pad_token_id=None)
        with self.assertRaises(rewind.ArgumentError):
            m.generate(ids, max_new_tokens=2, do_sample=True, temperature=0.0)
        with self.assertRaises(rewind.ArgumentError):
            m.generate(ids, max_new_tokens=-1)
        with self.assertRaises(rewind.ArgumentError):
            m.generate(np.array([[1.5, 2.0]]), max_new_tokens=2)
        with self.assertRaises(rewind.ArgumentError):
            m.generate(np.zeros((2, 3), np.int64), max_new_tokens=2)
        with self.assertRaises(rewind.ArgumentError):
            m.generate([], max_new_tokens=2)
        with self.assertRaises(rewind.ArgumentError):
            m.generate(ids, max_new_tokens=2, assistant_model="draft.gguf")
        with self.assertRaises(rewind.ShapeError) as e:
            m.generate(ids[:, :3], past_key_values=self.pkv, max_new_tokens=2)
        self.assertIn("covers", str(e.exception))
        with self.assertRaises(rewind.ArgumentError):
            rewind.next_logits(rewind.Context(m), rewind.Cache(m, 16), out=np.zeros(3, np.float32))

    def test_error_classes(self):
        e = rewind.Error("shape", "x")
        self.assertIsInstance(e, rewind.ShapeError)
        self.assertEqual((e.status, e.code), ("shape", 4))
        with self.assertRaises(rewind.IoError) as e:
            rewind.Model("/nonexistent.gguf")
        self.assertEqual(e.exception.code, 1)


class NumpyAndGenerateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = rewind.Model(LLAMA)
        cls.draft = rewind.Model(DRAFT)
        cls.ids = cls.model.tokenize(PROMPT)

    def test_token_ids_as_numpy_or_lists(self):
        plain = self.model.generate([self.ids], max_new_tokens=16, stop_at_eog=False)
        self.assertEqual(plain.dtype, np.int64)
        self.assertEqual(plain.shape, (1, len(self.ids) + 16))
        for ids in (self.ids, np.array(self.ids, np.int32), np.array([self.ids], np.int64),
                    np.repeat(np.array(self.ids, np.int32), 2)[::2], np.array(self.ids, np.uint16)):
            np.testing.assert_array_equal(self.model.generate(ids, max_new_tokens=16, stop_at_eog=False), plain)
        s = rewind.Session(self.model, capacity=64)
        s.append_tokens(np.array(self.ids, np.int32))
        self.assertEqual(s.cache.tokens(), self.ids)

    def test_logits_into_a_callers_array(self):
        s = rewind.Session(self.model, capacity=64)
        s.append_tokens(self.ids)
        out = np.empty(self.model.n_vocab, np.float32)
        got = s.next_logits(out=out)
        self.assertIs(got, out)
        np.testing.assert_array_equal(out, s.next_logits())
        self.assertEqual(int(np.argmax(out)), self.model.generate([self.ids], max_new_tokens=1)[0, -1])

    def test_speculation_arguments_are_lossless_and_counted(self):
        plain = self.model.generate([self.ids], max_new_tokens=40, stop_at_eog=False)
        cases = [{"prompt_lookup_num_tokens": 4}, {"assistant_model": self.draft},
                 {"assistant_model": self.draft, "num_assistant_tokens": 3},
                 {"reference_texts": [PROMPT + "    return 0\n"]},
                 {"prompt_lookup_num_tokens": 6, "assistant_model": self.draft, "reference_texts": "x = 1\n"}]
        for kw in cases:
            with self.subTest(kw=sorted(kw)):
                out = self.model.generate([self.ids], max_new_tokens=40, stop_at_eog=False,
                                          return_dict_in_generate=True, **kw)
                np.testing.assert_array_equal(out.sequences, plain)
                self.assertEqual(out.stats.emitted, 40)
                self.assertGreater(out.num_proposed_tokens, 0)
                self.assertLessEqual(out.num_accepted_tokens, out.num_proposed_tokens)
                self.assertLess(out.num_passes, 40)
                self.assertIs(out["sequences"], out.sequences)
        out = self.model.generate([self.ids], max_new_tokens=4, return_dict_in_generate=True, use_cache=False)
        self.assertIsNone(out.past_key_values)

    def test_continuing_from_returned_past_key_values_runs_only_the_rest(self):
        first = self.model.generate([self.ids], max_new_tokens=10, stop_at_eog=False, return_dict_in_generate=True)
        more = np.concatenate([first.sequences, np.array([self.model.tokenize("\n", add_bos=False)])], axis=1)
        cont = self.model.generate(more, past_key_values=first.past_key_values, max_new_tokens=12, stop_at_eog=False,
                                   return_dict_in_generate=True)
        whole = self.model.generate(more, max_new_tokens=12, stop_at_eog=False)
        np.testing.assert_array_equal(cont.sequences, whole)
        # Only input_ids past the cache ran: appending the new id ran the cache's held-back one, and
        # generation starts from the new id alone.
        self.assertEqual(cont.stats.prompt_tokens, 1)
        half = [(k.astype(np.float16), v.astype(np.float16)) for k, v in first.past_key_values]
        out16 = self.model.generate(more, past_key_values=half, max_new_tokens=2, return_dict_in_generate=True)
        self.assertEqual(out16.past_key_values[0][0].dtype, np.float16)

    def test_sampling_is_reproducible_and_streamed(self):
        kw = {"max_new_tokens": 24, "do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 7,
              "stop_at_eog": False}
        a = self.model.generate([self.ids], **kw)
        np.testing.assert_array_equal(a, self.model.generate([self.ids], prompt_lookup_num_tokens=4, **kw))
        self.assertFalse(np.array_equal(a, self.model.generate([self.ids], **dict(kw, seed=8))))
        got = list(self.model.stream([self.ids], **kw))
        self.assertEqual(got, a[0, len(self.ids):].tolist())
        st = self.model.stream(np.array([self.ids]), text=True, **kw)
        text = "".join(st)
        self.assertEqual(text, self.model.detokenize(a[0, len(self.ids):].tolist()))
        np.testing.assert_array_equal(st.sequences, a)
        st = self.model.stream([self.ids], **kw)
        taken = [t for _, t in zip(range(5), st)]
        st.close()
        np.testing.assert_array_equal(st.sequences, a[:, : len(self.ids) + 5])
        self.assertEqual(taken, a[0, len(self.ids): len(self.ids) + 5].tolist())

        class Streamer:  # transformers' streamer protocol: put() the prompt, then each token; end()
            def __init__(self):
                self.puts, self.ended = [], False

            def put(self, value):
                self.puts.append(np.asarray(value).reshape(-1).tolist())

            def end(self):
                self.ended = True

        sm = Streamer()
        self.model.generate([self.ids], streamer=sm, **kw)
        self.assertTrue(sm.ended)
        self.assertEqual(sm.puts[0], self.ids)
        self.assertEqual(sum(sm.puts[1:], []), a[0, len(self.ids):].tolist())

    @unittest.skipUnless(CLI, "REWIND_CLI (the rewind executable) is not set")
    def test_output_equals_the_clis_for_the_same_settings(self):
        cases = [([], {}), (["--spec", "ngram", "-k", "10"], {"prompt_lookup_num_tokens": 10}),
                 (["--spec", "draft", "--draft", DRAFT, "-k", "4"], {"assistant_model": self.draft,
                                                                    "num_assistant_tokens": 4}),
                 (["--temp", "0.8", "--top-k", "40", "--top-p", "0.9", "--seed", "7"],
                  {"do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 7}),
                 (["--temp", "1.0", "--seed", "3", "--spec", "ngram"],
                  {"do_sample": True, "top_k": 0, "seed": 3, "prompt_lookup_num_tokens": 8})]
        for args, kw in cases:
            with self.subTest(args=args):
                r = subprocess.run([CLI, "generate", "-m", LLAMA, "-p", PROMPT, "-n", "48", "--json"] + args,
                                   check=True, capture_output=True, text=True, env=CLI_ENV)
                cli = json.loads(r.stdout)
                self.assertEqual(cli["prompt_ids"], self.ids)
                # The CLI's cache is F16 (--kv-type auto); the module's default is F32.
                out = self.model.generate([self.ids], max_new_tokens=48, kv_f16=True, **kw)
                self.assertEqual(out[0, len(self.ids):].tolist(), cli["generated_ids"])


if __name__ == "__main__":
    unittest.main()
