"""rewind from Python: lossless speculative decoding through the C API (rewind_c.h), using only
the standard library's ctypes.

    import rewind
    model = rewind.Model("pycode-4m.gguf")
    session = rewind.Session(model)
    session.append_text("def parse_args(argv):")
    text, stats = session.generate(64, source="auto", k=4)

The shared library is found from $REWIND_LIBRARY, else as librewind_c.so beside this file, in
../lib of an installed prefix, or on the loader's path. Failures raise rewind.Error, whose
`status` names the kind ("io", "format", "unsupported", "shape", "capacity", "argument",
"state", "internal").
"""
import ctypes
import os

__all__ = ["Error", "Model", "Context", "Cache", "Session", "Stats", "GenerateOptions", "version"]

_STATUS = ["ok", "io", "format", "unsupported", "shape", "capacity", "argument", "state", "internal"]
_STOP = ["max_tokens", "end_of_generation", "stop_string", "context_full"]
_CAPACITY = 5


class Error(Exception):
    """A failed call: `status` is the code's name, the message says what and where."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _ContextOptions(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int32), ("max_batch", ctypes.c_int64)]


class GenerateOptions(ctypes.Structure):
    _fields_ = [
        ("max_tokens", ctypes.c_int64),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repeat_penalty", ctypes.c_float),
        ("repeat_last_n", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("stop_at_eog", ctypes.c_int),
        ("stop_strings", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop_strings", ctypes.c_size_t),
    ]


class _SpecOptions(ctypes.Structure):
    _fields_ = [
        ("source", ctypes.c_char_p),
        ("k", ctypes.c_int32),
        ("adaptive", ctypes.c_int),
        ("references", ctypes.POINTER(ctypes.c_char_p)),
        ("n_references", ctypes.c_size_t),
        ("draft", ctypes.c_void_p),
    ]


class Stats(ctypes.Structure):
    """What a generation did: tokens emitted, target passes, guesses proposed and accepted."""

    _fields_ = [
        ("emitted", ctypes.c_int64),
        ("passes", ctypes.c_int64),
        ("proposed", ctypes.c_int64),
        ("accepted", ctypes.c_int64),
        ("prompt_tokens", ctypes.c_int64),
        ("prompt_seconds", ctypes.c_double),
        ("generate_seconds", ctypes.c_double),
        ("stop", ctypes.c_int32),
    ]

    @property
    def acceptance_rate(self):
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_pass(self):
        return self.emitted / self.passes if self.passes else 0.0

    @property
    def stop_reason(self):
        return _STOP[self.stop] if 0 <= self.stop < len(_STOP) else str(self.stop)

    def __repr__(self):
        return (f"Stats(emitted={self.emitted}, passes={self.passes}, proposed={self.proposed}, "
                f"accepted={self.accepted}, stop={self.stop_reason!r})")


def _find_library():
    env = os.environ.get("REWIND_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "librewind_c.so"), os.path.join(here, "..", "..", "lib", "librewind_c.so")):
        if os.path.exists(p):
            return p
    return "librewind_c.so"


_lib = ctypes.CDLL(_find_library())
_P = ctypes.c_void_p
_tok_p = ctypes.POINTER(ctypes.c_int32)
_size_p = ctypes.POINTER(ctypes.c_size_t)
_SIGNATURES = {
    "rewind_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "rewind_last_error": (ctypes.c_char_p, []),
    "rewind_version": (ctypes.c_char_p, []),
    "rewind_model_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "rewind_model_free": (None, [_P]),
    "rewind_model_n_vocab": (ctypes.c_int32, [_P]),
    "rewind_model_n_ctx": (ctypes.c_int32, [_P]),
    "rewind_model_bos": (ctypes.c_int32, [_P]),
    "rewind_model_eos": (ctypes.c_int32, [_P]),
    "rewind_tokenize": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, _tok_p, ctypes.c_size_t, _size_p]),
    "rewind_detokenize": (ctypes.c_int, [_P, _tok_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "rewind_context_default_options": (_ContextOptions, []),
    "rewind_context_new": (ctypes.c_int, [_P, ctypes.POINTER(_ContextOptions), ctypes.POINTER(_P)]),
    "rewind_context_free": (None, [_P]),
    "rewind_cache_new": (ctypes.c_int, [_P, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(_P)]),
    "rewind_cache_free": (None, [_P]),
    "rewind_cache_n_tokens": (ctypes.c_int64, [_P]),
    "rewind_cache_capacity": (ctypes.c_int64, [_P]),
    "rewind_cache_tokens": (ctypes.c_int, [_P, _tok_p, ctypes.c_size_t, _size_p]),
    "rewind_cache_truncate": (ctypes.c_int, [_P, ctypes.c_int64]),
    "rewind_cache_save": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "rewind_cache_load": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int, _tok_p, ctypes.c_size_t, ctypes.POINTER(_P)]),
    "rewind_append": (ctypes.c_int, [_P, _P, _tok_p, ctypes.c_size_t]),
    "rewind_generate_default_options": (GenerateOptions, []),
    "rewind_generate": (ctypes.c_int, [_P, _P, ctypes.POINTER(GenerateOptions), _tok_p, ctypes.c_size_t, _size_p, ctypes.POINTER(Stats)]),
    "rewind_spec_default_options": (_SpecOptions, []),
    "rewind_generate_speculative": (ctypes.c_int, [_P, _P, ctypes.POINTER(GenerateOptions), ctypes.POINTER(_SpecOptions), _tok_p, ctypes.c_size_t, _size_p, ctypes.POINTER(Stats)]),
}
for _name, (_res, _args) in _SIGNATURES.items():
    _f = getattr(_lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def _check(status):
    if status != 0:
        name = _STATUS[status] if 0 <= status < len(_STATUS) else str(status)
        raise Error(name, _lib.rewind_last_error().decode("utf-8", "replace"))


def _ids(tokens):
    tokens = list(tokens)
    return (ctypes.c_int32 * len(tokens))(*tokens), len(tokens)


def _c_strings(strings):
    encoded = [s.encode("utf-8") for s in strings]
    return (ctypes.c_char_p * len(encoded))(*encoded), len(encoded)


def version():
    return _lib.rewind_version().decode()


class Model:
    """A GGUF model, read-only; any number of contexts and caches may share it."""

    def __init__(self, path):
        self._h = _P()
        _check(_lib.rewind_model_load(os.fsencode(path), ctypes.byref(self._h)))
        self.path = path

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.rewind_model_free(self._h)
            self._h = None

    @property
    def n_vocab(self):
        return _lib.rewind_model_n_vocab(self._h)

    @property
    def n_ctx(self):
        return _lib.rewind_model_n_ctx(self._h)

    def tokenize(self, text, add_bos=None):
        """Ids of `text`; add_bos None follows the model's default."""
        data = text.encode("utf-8")
        flag = -1 if add_bos is None else int(bool(add_bos))
        n = ctypes.c_size_t(0)
        status = _lib.rewind_tokenize(self._h, data, len(data), flag, None, 0, ctypes.byref(n))
        if status != _CAPACITY:
            _check(status)
        buf = (ctypes.c_int32 * max(n.value, 1))()
        _check(_lib.rewind_tokenize(self._h, data, len(data), flag, buf, n.value, ctypes.byref(n)))
        return list(buf[: n.value])

    def detokenize(self, tokens):
        arr, count = _ids(tokens)
        n = ctypes.c_size_t(0)
        status = _lib.rewind_detokenize(self._h, arr, count, None, 0, ctypes.byref(n))
        if status != _CAPACITY:
            _check(status)
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(_lib.rewind_detokenize(self._h, arr, count, buf, n.value + 1, ctypes.byref(n)))
        return buf.raw[: n.value].decode("utf-8", "replace")


class Context:
    """Run buffers and threads for one model."""

    def __init__(self, model, n_threads=1, max_batch=256):
        opts = _ContextOptions(n_threads, max_batch)
        self._h = _P()
        _check(_lib.rewind_context_new(model._h, ctypes.byref(opts), ctypes.byref(self._h)))
        self.model = model

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.rewind_context_free(self._h)
            self._h = None


class Cache:
    """A token sequence and the KV cache of all of it but its newest token."""

    def __init__(self, model, capacity=0, kv_f16=False, _handle=None):
        self.model = model
        if _handle is not None:
            self._h = _handle
            return
        self._h = _P()
        _check(_lib.rewind_cache_new(model._h, capacity, int(kv_f16), ctypes.byref(self._h)))

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.rewind_cache_free(self._h)
            self._h = None

    def __len__(self):
        return _lib.rewind_cache_n_tokens(self._h)

    @property
    def capacity(self):
        return _lib.rewind_cache_capacity(self._h)

    def tokens(self):
        n = ctypes.c_size_t(len(self))
        buf = (ctypes.c_int32 * max(n.value, 1))()
        _check(_lib.rewind_cache_tokens(self._h, buf, n.value, ctypes.byref(n)))
        return list(buf[: n.value])

    def truncate(self, n):
        _check(_lib.rewind_cache_truncate(self._h, n))

    def save(self, path):
        """Writes the KV cache to `path` and its ids to `path` + ".ids" (one per line)."""
        _check(_lib.rewind_cache_save(self._h, os.fsencode(path)))
        with open(str(path) + ".ids", "w") as f:
            f.write("\n".join(str(t) for t in self.tokens()))

    @classmethod
    def load(cls, model, path, capacity=0, kv_f16=False):
        with open(str(path) + ".ids") as f:
            ids = [int(line) for line in f.read().split()]
        arr, count = _ids(ids)
        h = _P()
        _check(_lib.rewind_cache_load(model._h, os.fsencode(path), capacity, int(kv_f16), arr, count, ctypes.byref(h)))
        return cls(model, _handle=h)


def _options(max_tokens, temperature, seed, stop, stop_at_eog, keep):
    o = _lib.rewind_generate_default_options()
    o.max_tokens = max_tokens
    o.temperature = temperature
    o.seed = seed
    o.stop_at_eog = int(stop_at_eog)
    if stop:
        arr, n = _c_strings(stop)
        keep.append(arr)
        o.stop_strings = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
        o.n_stop_strings = n
    return o


def generate(ctx, cache, max_tokens=128, source=None, k=4, adaptive=False, references=(), draft=None,
             temperature=0.0, seed=0, stop=(), stop_at_eog=True):
    """Generates from the sequence in `cache`; the ids are appended to it and returned with the
    Stats. source None decodes plainly; "ngram", "ref", "draft" or "auto" speculates (same
    tokens: speculation is lossless)."""
    keep = []
    opts = _options(max_tokens, temperature, seed, stop, stop_at_eog, keep)
    out = (ctypes.c_int32 * max(max_tokens, 1))()
    n = ctypes.c_size_t(0)
    stats = Stats()
    if source is None:
        _check(_lib.rewind_generate(ctx._h, cache._h, ctypes.byref(opts), out, max_tokens, ctypes.byref(n), ctypes.byref(stats)))
    else:
        spec = _lib.rewind_spec_default_options()
        spec.source = source.encode()
        spec.k = k
        spec.adaptive = int(adaptive)
        if references:
            arr, count = _c_strings(references)
            keep.append(arr)
            spec.references = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
            spec.n_references = count
        spec.draft = draft._h if draft is not None else None
        _check(_lib.rewind_generate_speculative(ctx._h, cache._h, ctypes.byref(opts), ctypes.byref(spec), out, max_tokens, ctypes.byref(n), ctypes.byref(stats)))
    return list(out[: n.value]), stats


class Session:
    """A context and a cache together: append text, generate, append more, generate again; the
    prefix already run is reused every time."""

    def __init__(self, model, capacity=0, n_threads=1):
        self.model = model
        self.context = Context(model, n_threads=n_threads)
        self.cache = Cache(model, capacity)

    def append_text(self, text):
        ids = self.model.tokenize(text, add_bos=None if len(self.cache) == 0 else False)
        self.append_tokens(ids)

    def append_tokens(self, ids):
        arr, n = _ids(ids)
        _check(_lib.rewind_append(self.context._h, self.cache._h, arr, n))

    def generate(self, max_tokens=128, **kw):
        """Returns (the generated text, Stats); keyword arguments as rewind.generate."""
        before = self.text()
        ids, stats = generate(self.context, self.cache, max_tokens, **kw)
        after = self.text()
        return (after[len(before):] if after.startswith(before) else self.model.detokenize(ids)), stats

    def text(self):
        return self.model.detokenize(self.cache.tokens())
