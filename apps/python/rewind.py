"""rewind from Python: lossless speculative decoding through the C API (rewind_c.h), using only
the standard library's ctypes.

    import rewind
    model = rewind.Model("pycode-4m.gguf")
    text = model.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                     tokenize=False, chat_template="chatml")  # as transformers'
    chat = rewind.Chat(model, system="You are terse.", chat_template="chatml")
    reply = chat.say("Hi", max_tokens=64)          # later turns reuse the cache: chat.last_turn
    session = rewind.Session(model)
    session.append_text("def parse_args(argv):")
    text, stats = session.generate(64, source="auto", k=4)
    for piece in session.stream(64, source="ngram"):  # text as it is decided; break stops it
        print(piece, end="", flush=True)
    logits = session.next_logits()                # what the next token is chosen from

    batch = rewind.Batch(model)                   # continuous batching: many requests at once
    batch.add("import os\n", max_tokens=32, source="ngram")
    for result in batch.run_until_done():
        print(result.id, result.stop_reason, result.text)

The shared library is found from $REWIND_LIBRARY, else as librewind_c.so beside this file, two
levels up (`cmake --install` puts this file in LIBDIR/rewind/python, beside the library), in
../../lib, or on the loader's path. Failures raise rewind.Error, whose
`status` names the kind ("io", "format", "unsupported", "shape", "capacity", "argument",
"state", "internal").
"""
import atexit
import ctypes
import os
import queue
import threading
import weakref

__all__ = ["Error", "Model", "Context", "Cache", "Session", "Stats", "GenerateOptions", "Batch", "Result", "Stream",
           "Chat", "ChatTurn", "generate", "stream", "next_logits", "version"]

_STATUS = ["ok", "io", "format", "unsupported", "shape", "capacity", "argument", "state", "internal"]
_STOP = ["max_tokens", "end_of_generation", "stop_string", "context_full", "cancelled"]
_STATE = ["running", "done", "failed", "cancelled"]
_CAPACITY = 5


class Error(Exception):
    """A failed call: `status` is the code's name, the message says what and where."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _ContextOptions(ctypes.Structure):
    _fields_ = [
        ("n_threads", ctypes.c_int32),
        ("max_batch", ctypes.c_int64),
        ("numerics", ctypes.c_char_p),
        ("simd", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
    ]


# rewind_token_callback: int (*)(rewind_token, void*), 0 to stop.
_TokenCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_void_p)


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
        ("on_token", _TokenCallback),
        ("user_data", ctypes.c_void_p),
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


class _BatchOptions(ctypes.Structure):
    _fields_ = [
        ("kv_budget_bytes", ctypes.c_uint64),
        ("kv_f16", ctypes.c_int),
        ("prefill_chunk", ctypes.c_int64),
        ("pass_tokens", ctypes.c_int64),
        ("share_prefixes", ctypes.c_int),
        ("cost_model", ctypes.c_int),
        ("pass_fixed_seconds", ctypes.c_double),
        ("pass_row_seconds", ctypes.c_double),
    ]


class _RequestInfo(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_int32),
        ("status", ctypes.c_int32),
        ("n_tokens", ctypes.c_int64),
        ("prompt_tokens_shared", ctypes.c_int64),
        ("first_token_seconds", ctypes.c_double),
        ("latency_seconds", ctypes.c_double),
        ("stats", Stats),
    ]


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class _ChatOptions(ctypes.Structure):
    _fields_ = [
        ("chat_template", ctypes.c_char_p),
        ("add_generation_prompt", ctypes.c_int),
        ("bos_token", ctypes.c_char_p),
        ("eos_token", ctypes.c_char_p),
        ("enable_thinking", ctypes.c_int),
        ("date_string", ctypes.c_char_p),
    ]


class ChatTurn(ctypes.Structure):
    """What a chat turn did: prompt_tokens (ids of the whole formatted conversation),
    reused_tokens (of them, already in the cache), run_tokens (run for this turn),
    prefill_seconds, and the reply's generation Stats (`stats`)."""

    _fields_ = [
        ("prompt_tokens", ctypes.c_int64),
        ("reused_tokens", ctypes.c_int64),
        ("run_tokens", ctypes.c_int64),
        ("prefill_seconds", ctypes.c_double),
        ("stats", Stats),
    ]

    def __repr__(self):
        return (f"ChatTurn(prompt_tokens={self.prompt_tokens}, reused_tokens={self.reused_tokens}, "
                f"run_tokens={self.run_tokens}, stats={self.stats!r})")


def _find_library():
    env = os.environ.get("REWIND_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "librewind_c.so"), os.path.join(here, "..", "..", "librewind_c.so"),
              os.path.join(here, "..", "..", "lib", "librewind_c.so")):
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
    "rewind_next_logits": (ctypes.c_int, [_P, _P, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)), _size_p]),
    "rewind_generate_default_options": (GenerateOptions, []),
    "rewind_generate": (ctypes.c_int, [_P, _P, ctypes.POINTER(GenerateOptions), _tok_p, ctypes.c_size_t, _size_p, ctypes.POINTER(Stats)]),
    "rewind_spec_default_options": (_SpecOptions, []),
    "rewind_generate_speculative": (ctypes.c_int, [_P, _P, ctypes.POINTER(GenerateOptions), ctypes.POINTER(_SpecOptions), _tok_p, ctypes.c_size_t, _size_p, ctypes.POINTER(Stats)]),
    "rewind_batch_default_options": (_BatchOptions, []),
    "rewind_batch_new": (ctypes.c_int, [_P, ctypes.POINTER(_ContextOptions), ctypes.POINTER(_BatchOptions), ctypes.POINTER(_P)]),
    "rewind_batch_free": (None, [_P]),
    "rewind_batch_add": (ctypes.c_int, [_P, _tok_p, ctypes.c_size_t, ctypes.POINTER(GenerateOptions), ctypes.POINTER(_SpecOptions), ctypes.POINTER(ctypes.c_uint64)]),
    "rewind_batch_step": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int64)]),
    "rewind_batch_cancel": (ctypes.c_int, [_P, ctypes.c_uint64]),
    "rewind_batch_n_active": (ctypes.c_int64, [_P]),
    "rewind_batch_kv_bytes": (ctypes.c_uint64, [_P]),
    "rewind_batch_request_info": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.POINTER(_RequestInfo)]),
    "rewind_batch_request_tokens": (ctypes.c_int, [_P, ctypes.c_uint64, _tok_p, ctypes.c_size_t, _size_p]),
    "rewind_batch_request_error": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "rewind_batch_finished": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, _size_p]),
    "rewind_batch_take": (ctypes.c_int, [_P, ctypes.c_uint64, _tok_p, ctypes.c_size_t, _size_p, ctypes.POINTER(_RequestInfo)]),
    "rewind_batch_release": (ctypes.c_int, [_P, ctypes.c_uint64]),
    "rewind_chat_default_options": (_ChatOptions, []),
    "rewind_chat_format": (ctypes.c_int, [_P, ctypes.POINTER(_ChatOptions), ctypes.POINTER(_ChatMessage), ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "rewind_chat_tokenize": (ctypes.c_int, [_P, ctypes.POINTER(_ChatOptions), ctypes.POINTER(_ChatMessage), ctypes.c_size_t, _tok_p, ctypes.c_size_t, _size_p]),
    "rewind_chat_new": (ctypes.c_int, [_P, ctypes.POINTER(_ChatOptions), ctypes.c_char_p, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(_P)]),
    "rewind_chat_free": (None, [_P]),
    "rewind_chat_say": (ctypes.c_int, [_P, _P, ctypes.c_char_p, ctypes.POINTER(GenerateOptions), ctypes.POINTER(_SpecOptions), ctypes.POINTER(ChatTurn)]),
    "rewind_chat_reply": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "rewind_chat_n_messages": (ctypes.c_size_t, [_P]),
    "rewind_chat_reset": (ctypes.c_int, [_P]),
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


def _numpy():
    """numpy if it can be imported, else None (rewind never needs it)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _context_options(n_threads, max_batch, numerics, simd, device):
    co = _lib.rewind_context_default_options()
    co.n_threads = n_threads
    co.max_batch = max_batch
    if numerics is not None:
        co.numerics = numerics.encode()
    if simd is not None:
        co.simd = simd.encode()
    if device is not None:
        co.device = device.encode()
    return co


def _chat_options(chat_template, add_generation_prompt, bos_token, eos_token, enable_thinking, date_string):
    o = _lib.rewind_chat_default_options()
    if chat_template is not None:
        o.chat_template = chat_template.encode("utf-8")
    o.add_generation_prompt = int(bool(add_generation_prompt))
    if bos_token is not None:
        o.bos_token = bos_token.encode("utf-8")
    if eos_token is not None:
        o.eos_token = eos_token.encode("utf-8")
    o.enable_thinking = int(bool(enable_thinking))
    if date_string is not None:
        o.date_string = date_string.encode("utf-8")
    return o


def _chat_messages(messages):
    """A conversation (a list of {"role", "content"} dicts, as transformers takes) as C messages.
    What rewind does not format (content that is not one str, tool_calls, other keys) raises
    Error("unsupported") naming the message; it is never flattened."""
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise Error("argument", "apply_chat_template: messages must be a list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        if not hasattr(m, "get") or not hasattr(m, "keys"):
            raise Error("argument", f"message {i}: a {type(m).__name__}, not a {{'role', 'content'}} dict")
        role = m.get("role")
        if not isinstance(role, str):
            raise Error("argument", f"message {i}: no role (or one that is not a str)")
        if m.get("tool_calls") is not None:
            raise Error("unsupported", f"message {i} ({role}): tool_calls are not formatted by rewind yet")
        extra = sorted(str(k) for k in m.keys() if k not in ("role", "content", "tool_calls"))
        if extra:
            raise Error("unsupported", f"message {i} ({role}): {', '.join(extra)} not formatted by rewind yet")
        content = m.get("content")
        if not isinstance(content, str):
            what = "no content" if content is None else f"content that is a {type(content).__name__}"
            raise Error("unsupported", f"message {i} ({role}): {what}; rewind formats plain text content only")
        if "\0" in role or "\0" in content:
            raise Error("argument", f"message {i} ({role!r}): a NUL character (the C API takes NUL-terminated text)")
        out.append((role.encode("utf-8"), content.encode("utf-8")))
    arr = (_ChatMessage * max(len(out), 1))(*[_ChatMessage(r, c) for r, c in out])
    return arr, len(out)


def _settle(*objs):
    """Ends the stream running on any of these contexts or caches (its tokens so far are kept),
    so that what comes next uses them alone."""
    for obj in objs:
        ref = getattr(obj, "_stream", None)
        s = ref() if ref is not None else None
        if s is not None:
            s.close()


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

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True, chat_template=None,
                            bos_token=None, eos_token=None, enable_thinking=True, date_string=None):
        """A conversation formatted as its chat template renders it, with the semantics of
        transformers' tokenizer.apply_chat_template: messages is a list of {"role", "content"}
        dicts (roles "system", "user", "assistant"); add_generation_prompt ends with the
        assistant's header (default False, as transformers'); tokenize=True returns the ids (the
        template's markers as control tokens, message text as text, one BOS when the template or
        tokenizer wants one), False the text. chat_template: None for the file's
        tokenizer.chat_template, else a built-in format name ("chatml", "qwen2.5", "llama3", ...)
        or a template's text. bos_token/eos_token: the texts the template writes (None: the
        tokenizer's); enable_thinking (Qwen3) and date_string (Llama 3.1+) as the templates take
        them. A message rewind does not format (content that is not a str, tool_calls) raises
        Error("unsupported") naming it; an unknown role Error("argument"); a model without a
        template and no chat_template Error("unsupported")."""
        arr, count = _chat_messages(messages)
        opts = _chat_options(chat_template, add_generation_prompt, bos_token, eos_token, enable_thinking, date_string)
        n = ctypes.c_size_t(0)
        if not tokenize:
            status = _lib.rewind_chat_format(self._h, ctypes.byref(opts), arr, count, None, 0, ctypes.byref(n))
            if status != _CAPACITY:
                _check(status)
            buf = ctypes.create_string_buffer(n.value + 1)
            _check(_lib.rewind_chat_format(self._h, ctypes.byref(opts), arr, count, buf, n.value + 1, ctypes.byref(n)))
            return buf.raw[: n.value].decode("utf-8")
        status = _lib.rewind_chat_tokenize(self._h, ctypes.byref(opts), arr, count, None, 0, ctypes.byref(n))
        if status != _CAPACITY:
            _check(status)
        ids = (ctypes.c_int32 * max(n.value, 1))()
        _check(_lib.rewind_chat_tokenize(self._h, ctypes.byref(opts), arr, count, ids, n.value, ctypes.byref(n)))
        return list(ids[: n.value])


class Context:
    """Run buffers and threads for one model.

    n_threads: threads of its pool (>= 1). max_batch: tokens per internal pass. numerics: "exact"
    (default: a token's logits never depend on its pass size or the thread count) or "llamacpp"
    (llama.cpp's CPU numerics, to compare with it). simd: the highest SIMD level the kernels may use,
    "scalar", "avx2", "avx-vnni" or "avx512" (None: the CPU's best). device: "cpu" (default), "cuda"
    or "cuda:N". An unknown name raises Error("argument"); a SIMD level this CPU lacks or a device
    that cannot run here raises Error("unsupported")."""

    def __init__(self, model, n_threads=1, max_batch=256, numerics=None, simd=None, device=None):
        opts = _context_options(n_threads, max_batch, numerics, simd, device)
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
        _settle(self)
        _check(_lib.rewind_cache_truncate(self._h, n))

    def save(self, path):
        """Writes the KV cache to `path` and its ids to `path` + ".ids" (one per line)."""
        _settle(self)
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


def _token_callback(on_token, errors):
    """on_token(token_id) as a C callback: returning False (or another false value but None)
    stops; an exception stops too, and is kept in `errors` for the caller to raise."""

    def call(token, _user_data):
        try:
            go_on = on_token(token)
        except BaseException as e:  # noqa: B902 - re-raised by the caller once the C call returns
            errors.append(e)
            return 0
        return 0 if go_on is not None and not go_on else 1

    return _TokenCallback(call)


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


def _spec(source, k, adaptive, references, draft, keep):
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
    return spec


def _run(ctx, cache, max_tokens, opts, spec):
    """One rewind_generate(_speculative) call: (ids, Stats)."""
    out = (ctypes.c_int32 * max(max_tokens, 1))()
    n = ctypes.c_size_t(0)
    stats = Stats()
    if spec is None:
        _check(_lib.rewind_generate(ctx._h, cache._h, ctypes.byref(opts), out, max_tokens, ctypes.byref(n), ctypes.byref(stats)))
    else:
        _check(_lib.rewind_generate_speculative(ctx._h, cache._h, ctypes.byref(opts), ctypes.byref(spec), out, max_tokens, ctypes.byref(n), ctypes.byref(stats)))
    return list(out[: n.value]), stats


def generate(ctx, cache, max_tokens=128, source=None, k=4, adaptive=False, references=(), draft=None,
             temperature=0.0, seed=0, stop=(), stop_at_eog=True, on_token=None):
    """Generates from the sequence in `cache`; the ids are appended to it and returned with the
    Stats. source None decodes plainly; "ngram", "ref", "draft" or "auto" speculates (same
    tokens: speculation is lossless).

    on_token: called with each token id as it is decided (before this returns); returning False
    stops the generation after that token (Stats.stop_reason "cancelled"), None or True goes on.
    An exception it raises stops the generation too and is raised from here, the tokens so far
    kept in the cache."""
    _settle(ctx, cache)
    keep = []
    opts = _options(max_tokens, temperature, seed, stop, stop_at_eog, keep)
    spec = _spec(source, k, adaptive, references, draft, keep) if source is not None else None
    errors = []
    if on_token is not None:
        cb = _token_callback(on_token, errors)
        keep.append(cb)
        opts.on_token = cb
    result = _run(ctx, cache, max_tokens, opts, spec)
    if errors:
        raise errors[0]
    return result


def next_logits(ctx, cache):
    """The logits of the next position: the scores (one per vocabulary id, before temperature,
    penalties and filters) the next generated token is chosen from, computed on `ctx`; greedy
    decoding takes their argmax. The cache is left as it was. A numpy float32 array when numpy can
    be imported, else a list of floats. Error("state") for an empty cache."""
    _settle(ctx, cache)
    p = ctypes.POINTER(ctypes.c_float)()
    n = ctypes.c_size_t(0)
    _check(_lib.rewind_next_logits(ctx._h, cache._h, ctypes.byref(p), ctypes.byref(n)))
    np = _numpy()
    if np is not None:
        return np.ctypeslib.as_array(p, shape=(n.value,)).copy()  # the C buffer is the context's
    return p[: n.value]


def _stream_worker(run, replies, messages):
    """The thread a Stream generates on: tokens go out through the callback, then ("done", ...)."""
    try:
        ids, stats = run()
        messages.put(("done", (ids, stats), None))
    except BaseException as e:  # noqa: B902 - handed to the consumer
        messages.put(("done", None, e))


class Stream:
    """A generation whose tokens arrive as they are decided: iterate over it for token ids (or
    text pieces, from Session.stream), break out of the loop or call close() to stop it. Each
    token is decided only once the previous one has been taken from the iterator, so the cache
    ends holding exactly the tokens taken. Made by rewind.stream() and Session.stream().

    After it ends (the iterator is exhausted, or close()): `tokens` (all generated ids),
    `stats` (Stats; stop_reason "cancelled" when closed early) and `text` (the generated text).
    Usable as a context manager (closed on exit). While it runs, its context and cache belong to
    it: generating, appending, truncating or next_logits on them first closes it.

    The generation runs in a helper thread that waits in the token callback while the caller
    holds a token, so the context never runs on two threads at once. Errors (rewind.Error) are
    raised from the iteration."""

    def __init__(self, ctx, cache, max_tokens=128, source=None, k=4, adaptive=False, references=(), draft=None,
                 temperature=0.0, seed=0, stop=(), stop_at_eog=True, text=False):
        _settle(ctx, cache)
        self.tokens = []
        self.stats = None
        self._ctx, self._cache = ctx, cache
        self._text_mode = text
        self._model = ctx.model
        self._pieces = []
        self._pending = []  # ids whose text is not complete yet (a UTF-8 sequence cut in two)
        self._anchor = None  # the ids before _pending, for the text of what follows them
        self._messages = queue.Queue()  # helper -> caller: ("token", id) or ("done", result, error)
        self._replies = queue.Queue()  # caller -> helper: go on (True) or stop (False)
        self._thread = None
        self._waiting = False  # the helper waits in the callback for a reply
        self._ended = False
        keep = []
        opts = _options(max_tokens, temperature, seed, stop, stop_at_eog, keep)
        spec = _spec(source, k, adaptive, references, draft, keep) if source is not None else None
        messages, replies = self._messages, self._replies

        def call(token, _user_data):  # on the helper thread; never references the Stream
            messages.put(("token", token))
            return 1 if replies.get() else 0

        cb = _TokenCallback(call)
        opts.on_token = cb
        keep.append(cb)
        self._run = lambda: (keep, _run(ctx, cache, max_tokens, opts, spec))[1]
        ctx._stream = cache._stream = weakref.ref(self)
        _live_streams.add(self)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self._ended:
                raise StopIteration
            if self._thread is None:
                self._anchor = self._cache.tokens()[-4:]
                self._thread = threading.Thread(target=_stream_worker, args=(self._run, self._replies, self._messages),
                                                name="rewind-stream", daemon=True)
                self._thread.start()
            elif self._waiting:
                self._waiting = False
                self._replies.put(True)
            try:
                kind, value, error = self._receive()
            except BaseException:
                self.close()
                raise
            if kind == "done":
                self._end(value, error)
                piece = self._piece(None, final=True) if self._text_mode else None
                if piece:
                    return piece
                continue
            self.tokens.append(value)
            if not self._text_mode:
                return value
            piece = self._piece(value)
            if piece:
                return piece

    def _receive(self):
        msg = self._messages.get()
        if msg[0] == "token":
            self._waiting = True
            return msg[0], msg[1], None
        return msg

    def _end(self, value, error):
        self._ended = True
        if self._thread is not None:
            self._thread.join()
        for obj in (self._ctx, self._cache):
            ref = getattr(obj, "_stream", None)
            if ref is not None and ref() is self:
                obj._stream = None
        if error is not None:
            raise error
        self.stats = value[1]

    def _piece(self, token, final=False):
        """The text `token` completes (with any ids waiting for the rest of a character)."""
        if token is not None:
            self._pending.append(token)
        if not self._pending or self._anchor is None:
            return ""
        detok = self._model.detokenize
        before = detok(self._anchor) if self._anchor else ""
        after = detok(self._anchor + self._pending)
        piece = after[len(before):] if after.startswith(before) else detok(self._pending)
        if not final and (not piece or piece.endswith("\ufffd")):
            return ""
        self._anchor = (self._anchor + self._pending)[-4:]
        self._pending = []
        self._pieces.append(piece)
        return piece

    @property
    def text(self):
        """The text generated so far (complete characters)."""
        if not self._text_mode:
            return self._model.detokenize(self.tokens) if self.tokens else ""
        return "".join(self._pieces)

    def close(self):
        """Stops the generation after the last token taken (kept in the cache, Stats.stop_reason
        "cancelled"); nothing if it has ended. A stream never iterated runs nothing."""
        if self._ended:
            return
        if self._thread is None:
            self._end(([], None), None)
            return
        while True:
            if self._waiting:
                self._waiting = False
                self._replies.put(False)
            kind, value, error = self._receive()
            if kind == "done":
                try:
                    self._end(value, error)
                finally:
                    if self._text_mode:
                        self._piece(None, final=True)  # into .text; nobody takes it now
                return
            self.tokens.append(value)  # decided before the stop reached it: in the cache too
            self._pending.append(value)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to report to from a finalizer
            pass


_live_streams = weakref.WeakSet()


@atexit.register
def _close_live_streams():
    """Ends streams still open at exit while threads can still run, so that no helper thread
    is left waiting inside a C call."""
    for s in list(_live_streams):
        try:
            s.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def stream(ctx, cache, max_tokens=128, **kw):
    """A Stream of the token ids rewind.generate(ctx, cache, max_tokens, **kw) would return, each
    as it is decided (keyword arguments as generate's, but on_token):

        for token in rewind.stream(ctx, cache, 64, source="ngram"):
            if token == newline:
                break  # stops the generation; the tokens so far stay in the cache
    """
    return Stream(ctx, cache, max_tokens, **kw)


class Session:
    """A context and a cache together: append text, generate, append more, generate again; the
    prefix already run is reused every time."""

    def __init__(self, model, capacity=0, n_threads=1, max_batch=256, numerics=None, simd=None, device=None,
                 kv_f16=False):
        """capacity: positions of the cache (0: the model's context); the context's options as
        Context's; kv_f16: store K/V in half precision."""
        self.model = model
        self.context = Context(model, n_threads=n_threads, max_batch=max_batch, numerics=numerics, simd=simd,
                               device=device)
        self.cache = Cache(model, capacity, kv_f16=kv_f16)

    def append_text(self, text):
        ids = self.model.tokenize(text, add_bos=None if len(self.cache) == 0 else False)
        self.append_tokens(ids)

    def append_tokens(self, ids):
        _settle(self.context, self.cache)
        arr, n = _ids(ids)
        _check(_lib.rewind_append(self.context._h, self.cache._h, arr, n))

    def generate(self, max_tokens=128, **kw):
        """Returns (the generated text, Stats); keyword arguments as rewind.generate (on_token
        gets each token id as it is decided and may stop the generation by returning False)."""
        before = self.text()
        ids, stats = generate(self.context, self.cache, max_tokens, **kw)
        after = self.text()
        return (after[len(before):] if after.startswith(before) else self.model.detokenize(ids)), stats

    def stream(self, max_tokens=128, text=True, **kw):
        """A Stream of the generated text, piece by piece as each token is decided (a piece may
        hold several tokens when a character spans them); text=False streams token ids instead.
        Keyword arguments as rewind.generate's, but on_token. Breaking out of the loop stops the
        generation after the last piece taken:

            for piece in session.stream(200, source="ngram"):
                print(piece, end="", flush=True)
                if "\n\n" in piece:
                    break
        """
        return Stream(self.context, self.cache, max_tokens, text=text, **kw)

    def next_logits(self):
        """The logits the next token is chosen from (rewind.next_logits); the session unchanged."""
        return next_logits(self.context, self.cache)

    def text(self):
        return self.model.detokenize(self.cache.tokens())


class Chat:
    """A conversation with a chat model: each say() adds a user message, formats the whole
    conversation with the model's chat template and generates the assistant's reply, running only
    what the cache does not hold yet (earlier turns are reused). The reply equals generating from
    the formatted conversation from scratch, plain or speculative.

        chat = rewind.Chat(model, system="You are terse.")
        print(chat.say("Reverse a list in Python.", max_tokens=64))
        print(chat.last_turn.reused_tokens)      # the next turn reuses the cache

    chat_template: None for the file's tokenizer.chat_template, else a built-in format name or a
    template's text (as Model.apply_chat_template). capacity: cache positions (0: the model's
    context); the context's options as Context's. `messages` is the conversation so far (a list
    of dicts, the system message first), `last_turn` the last say()'s ChatTurn."""

    def __init__(self, model, system=None, chat_template=None, capacity=0, n_threads=1, max_batch=256,
                 numerics=None, simd=None, device=None, kv_f16=False, bos_token=None, eos_token=None,
                 enable_thinking=True, date_string=None):
        if system is not None and (not isinstance(system, str) or "\0" in system):
            raise Error("argument", "Chat: system must be a str without NUL characters")
        self.model = model
        self.context = Context(model, n_threads=n_threads, max_batch=max_batch, numerics=numerics, simd=simd,
                               device=device)
        opts = _chat_options(chat_template, True, bos_token, eos_token, enable_thinking, date_string)
        self._h = _P()
        _check(_lib.rewind_chat_new(model._h, ctypes.byref(opts), system.encode("utf-8") if system else None,
                                    capacity, int(kv_f16), ctypes.byref(self._h)))
        self._system = [{"role": "system", "content": system}] if system else []
        self._messages = list(self._system)
        self.last_turn = None

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.rewind_chat_free(self._h)
            self._h = None

    @property
    def messages(self):
        return [dict(m) for m in self._messages]

    def say(self, text, max_tokens=128, temperature=0.0, seed=0, stop=(), source=None, k=4, adaptive=False,
            references=(), draft=None, on_token=None):
        """Adds `text` as the user's message and returns the assistant's reply (its end-of-turn
        token left out); `last_turn` then holds the ChatTurn. Generation options as
        rewind.generate's (it stops at end-of-generation tokens such as <|im_end|>); on_token gets
        each reply token id as it is decided and may stop the reply by returning False. On an
        error (Error("capacity") when the conversation no longer fits: reset()) the conversation
        is unchanged."""
        if not isinstance(text, str):
            raise Error("unsupported", f"Chat.say: a {type(text).__name__}; rewind formats plain text only")
        if "\0" in text:
            raise Error("argument", "Chat.say: a NUL character (the C API takes NUL-terminated text)")
        _settle(self.context)
        keep = []
        opts = _options(max_tokens, temperature, seed, stop, True, keep)
        spec = _spec(source, k, adaptive, references, draft, keep) if source is not None else None
        errors = []
        if on_token is not None:
            cb = _token_callback(on_token, errors)
            keep.append(cb)
            opts.on_token = cb
        turn = ChatTurn()
        _check(_lib.rewind_chat_say(self.context._h, self._h, text.encode("utf-8"), ctypes.byref(opts),
                                    ctypes.byref(spec) if spec is not None else None, ctypes.byref(turn)))
        n = ctypes.c_size_t(0)
        status = _lib.rewind_chat_reply(self._h, None, 0, ctypes.byref(n))
        if status != _CAPACITY:
            _check(status)
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(_lib.rewind_chat_reply(self._h, buf, n.value + 1, ctypes.byref(n)))
        reply = buf.raw[: n.value].decode("utf-8", "replace")
        self._messages += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]
        self.last_turn = turn
        if errors:
            raise errors[0]
        return reply

    def reset(self):
        """Forgets the conversation (messages and cache); the system message stays."""
        _settle(self.context)
        _check(_lib.rewind_chat_reset(self._h))
        self._messages = list(self._system)
        self.last_turn = None


class Result:
    """A batch request: `id`, `state` ("running", "done", "failed", "cancelled"), the generated
    `tokens` and their `text`, `stop_reason` (once ended), `stats` (Stats), `error` (a
    rewind.Error when it failed, else None), `prompt_tokens_shared` (prompt positions copied from
    another request), `first_token_seconds` and `latency_seconds` (from add)."""

    def __init__(self, request_id, info, tokens, text, error):
        self.id = request_id
        self.state = _STATE[info.state] if 0 <= info.state < len(_STATE) else str(info.state)
        self.tokens = tokens
        self.text = text
        self.stats = info.stats
        self.error = error
        self.prompt_tokens_shared = info.prompt_tokens_shared
        self.first_token_seconds = info.first_token_seconds
        self.latency_seconds = info.latency_seconds

    @property
    def stop_reason(self):
        return self.stats.stop_reason if self.state in ("done", "cancelled") else None

    def __repr__(self):
        return f"Result(id={self.id}, state={self.state!r}, tokens={len(self.tokens)}, stop={self.stop_reason!r})"


class Batch:
    """Continuous batching: requests decode together, one forward pass per step(), each with its
    own prompt, sampling and guess source; they join (add) and leave (when they end, or cancel)
    between steps. Each request's tokens equal what it would generate alone.

        batch = rewind.Batch(model)
        a = batch.add("def f(x):\n", max_tokens=64)
        b = batch.add([1, 500, 37], max_tokens=16, source="ngram", k=4)
        for result in batch.run_until_done():
            print(result.id, result.stop_reason, result.text)

    Failures raise rewind.Error and change nothing; a request that fails while running ends with
    state "failed" and its own `error`, the others go on."""

    def __init__(self, model, n_threads=1, max_batch=256, kv_budget_bytes=0, kv_f16=False, prefill_chunk=64,
                 pass_tokens=0, share_prefixes=True, cost_model=False, numerics=None, simd=None, device=None):
        """The batch's own context takes n_threads, max_batch, numerics, simd and device as
        Context does."""
        self.model = model
        co = _context_options(n_threads, max_batch, numerics, simd, device)
        bo = _lib.rewind_batch_default_options()
        bo.kv_budget_bytes = kv_budget_bytes
        bo.kv_f16 = int(kv_f16)
        bo.prefill_chunk = prefill_chunk
        bo.pass_tokens = pass_tokens
        bo.share_prefixes = int(share_prefixes)
        bo.cost_model = int(cost_model)
        self._prompts = {}  # id -> prompt ids, for the text of what follows them
        self._h = _P()
        _check(_lib.rewind_batch_new(model._h, ctypes.byref(co), ctypes.byref(bo), ctypes.byref(self._h)))

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.rewind_batch_free(self._h)
            self._h = None

    def __len__(self):
        """Requests running."""
        return _lib.rewind_batch_n_active(self._h)

    @property
    def kv_bytes(self):
        """Bytes of KV cache the running requests hold."""
        return _lib.rewind_batch_kv_bytes(self._h)

    def add(self, prompt, max_tokens=128, source=None, k=4, adaptive=False, references=(), draft=None,
            temperature=0.0, seed=0, stop=(), stop_at_eog=True):
        """Adds a request and returns its id. `prompt` is text (tokenized with the model's BOS
        rule) or a list of ids; source None decodes plainly, else "ngram", "ref", "draft" or
        "auto" guesses k tokens a step (other arguments as rewind.generate). A request that does
        not fit the KV budget raises Error("capacity"), and the batch is unchanged."""
        ids = self.model.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        keep = []
        opts = _options(max_tokens, temperature, seed, stop, stop_at_eog, keep)
        spec = _spec(source, k, adaptive, references, draft, keep) if source is not None else None
        arr, n = _ids(ids)
        rid = ctypes.c_uint64(0)
        _check(_lib.rewind_batch_add(self._h, arr, n, ctypes.byref(opts), ctypes.byref(spec) if spec is not None else None,
                                     ctypes.byref(rid)))
        self._prompts[rid.value] = ids
        return rid.value

    def step(self):
        """One forward pass over every running request; returns how many still run."""
        n = ctypes.c_int64(0)
        _check(_lib.rewind_batch_step(self._h, ctypes.byref(n)))
        return n.value

    def cancel(self, request_id):
        """Ends a running request at the next step (its tokens so far are kept)."""
        _check(_lib.rewind_batch_cancel(self._h, request_id))

    def _tokens(self, request_id):
        n = ctypes.c_size_t(0)
        status = _lib.rewind_batch_request_tokens(self._h, request_id, None, 0, ctypes.byref(n))
        if status != _CAPACITY:
            _check(status)
        buf = (ctypes.c_int32 * max(n.value, 1))()
        _check(_lib.rewind_batch_request_tokens(self._h, request_id, buf, n.value, ctypes.byref(n)))
        return list(buf[: n.value])

    def _error(self, request_id, info):
        if info.state != 2:  # REWIND_REQUEST_FAILED
            return None
        n = ctypes.c_size_t(0)
        status = _lib.rewind_batch_request_error(self._h, request_id, None, 0, ctypes.byref(n))
        if status != _CAPACITY:
            _check(status)
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(_lib.rewind_batch_request_error(self._h, request_id, buf, n.value + 1, ctypes.byref(n)))
        name = _STATUS[info.status] if 0 <= info.status < len(_STATUS) else str(info.status)
        return Error(name, buf.raw[: n.value].decode("utf-8", "replace"))

    def _text(self, request_id, tokens):
        prompt = self._prompts.get(request_id, [])
        before = self.model.detokenize(prompt)
        after = self.model.detokenize(prompt + tokens)
        return after[len(before):] if after.startswith(before) else self.model.detokenize(tokens)

    def result(self, request_id):
        """The request's Result so far (running or ended), without taking it out."""
        info = _RequestInfo()
        _check(_lib.rewind_batch_request_info(self._h, request_id, ctypes.byref(info)))
        tokens = self._tokens(request_id)
        return Result(request_id, info, tokens, self._text(request_id, tokens), self._error(request_id, info))

    def finished(self):
        """Takes every ended request out of the batch: their Results, in the order they were added."""
        n = ctypes.c_size_t(0)
        status = _lib.rewind_batch_finished(self._h, None, 0, ctypes.byref(n))
        if status != _CAPACITY:
            _check(status)
        ids = (ctypes.c_uint64 * max(n.value, 1))()
        _check(_lib.rewind_batch_finished(self._h, ids, n.value, ctypes.byref(n)))
        out = []
        for rid in ids[: n.value]:
            r = self.result(rid)
            _check(_lib.rewind_batch_release(self._h, rid))
            self._prompts.pop(rid, None)
            out.append(r)
        return out

    def run_until_done(self):
        """Steps until no request runs, yielding each request's Result as it ends (requests
        added meanwhile, e.g. from the loop's body, are run too)."""
        while True:
            yield from self.finished()
            if len(self) == 0:
                return
            self.step()
