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
    session.append("\nMAX_ARGS = ")                # a guidance-style program: text, then gen()
    n = session.gen(regex="[0-9]{1,3}", source="ngram")  # the captured str; session.last_gen
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
import json
import os
import queue
import threading
import weakref
from typing import TYPE_CHECKING, NamedTuple, Sequence, Tuple

if TYPE_CHECKING:  # annotations only: numpy is imported when first needed
    import numpy as np

__all__ = ["Error", "IoError", "FormatError", "UnsupportedError", "ShapeError", "CapacityError", "ArgumentError",
           "StateError", "InternalError", "KvShape", "GenerateOutput", "GenResult", "Model", "Context", "Cache", "Session", "Stats", "GenerateOptions", "Batch", "Result", "Stream",
           "Chat", "ChatTurn", "generate", "stream", "next_logits", "version", "generate_hf", "stream_hf"]

_STATUS = ["ok", "io", "format", "unsupported", "shape", "capacity", "argument", "state", "internal"]
_STOP = ["max_tokens", "end_of_generation", "stop_string", "context_full", "cancelled"]
_STATE = ["running", "done", "failed", "cancelled"]
_CAPACITY = 5


class Error(Exception):
    """A failed call: `status` is the code's name ("io", "format", "unsupported", "shape",
    "capacity", "argument", "state", "internal"), `code` its rewind_status number, and the message
    says what and where. Each status has its subclass (rewind.ShapeError, rewind.ArgumentError,
    ...): `except rewind.ShapeError` catches one kind, `except rewind.Error` all of them.
    Error(status, message) makes the subclass of that status."""

    status = None
    code = None

    def __new__(cls, *args, **kwargs):
        if cls is Error and len(args) == 2 and args[0] in _ERROR_CLASSES:
            cls = _ERROR_CLASSES[args[0]]
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args):
        if len(args) == 2:
            status, message = args
        else:
            status, message = type(self).status, (args[0] if args else "")
        super().__init__(message)
        self.status = status
        self.code = _STATUS.index(status) if status in _STATUS else None


class IoError(Error):
    """A file cannot be opened, read or written (status "io")."""
    status, code = "io", 1


class FormatError(Error):
    """A malformed, truncated or corrupted file (status "format")."""
    status, code = "format", 2


class UnsupportedError(Error):
    """An architecture, type, option or argument rewind does not handle (status "unsupported")."""
    status, code = "unsupported", 3


class ShapeError(Error):
    """Sizes disagree: shapes, layer or head counts (status "shape")."""
    status, code = "shape", 4


class CapacityError(Error):
    """A cache, context or buffer is too small (status "capacity")."""
    status, code = "capacity", 5


class ArgumentError(Error):
    """A bad argument: a NULL handle, an out-of-range option or id, a wrong dtype (status "argument")."""
    status, code = "argument", 6


class StateError(Error):
    """The object's state forbids the call: a closed model, a cache of another model (status "state")."""
    status, code = "state", 7


class InternalError(Error):
    """Out of memory, or a failure rewind did not expect (status "internal")."""
    status, code = "internal", 8


_ERROR_CLASSES = {c.status: c for c in (IoError, FormatError, UnsupportedError, ShapeError, CapacityError,
                                        ArgumentError, StateError, InternalError)}


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


class _Logprobs(ctypes.Structure):
    _fields_ = [
        ("top_n", ctypes.c_int32),
        ("processed", ctypes.c_int),
        ("logprob", ctypes.POINTER(ctypes.c_float)),
        ("top_tokens", ctypes.POINTER(ctypes.c_int32)),
        ("top_logprobs", ctypes.POINTER(ctypes.c_float)),
    ]


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
        ("frequency_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("logit_bias_tokens", ctypes.POINTER(ctypes.c_int32)),
        ("logit_bias_values", ctypes.POINTER(ctypes.c_float)),
        ("n_logit_bias", ctypes.c_size_t),
        ("logprobs", ctypes.POINTER(_Logprobs)),
        ("grammar", ctypes.c_char_p),
        ("json_schema", ctypes.c_char_p),
        ("regex", ctypes.c_char_p),
        ("json_whitespace", ctypes.c_int),
    ]


class _SpecOptions(ctypes.Structure):
    _fields_ = [
        ("source", ctypes.c_char_p),
        ("k", ctypes.c_int32),
        ("k_policy", ctypes.c_int),
        ("references", ctypes.POINTER(ctypes.c_char_p)),
        ("n_references", ctypes.c_size_t),
        ("draft", ctypes.c_void_p),
        ("branches", ctypes.c_int32),
    ]


_K_POLICIES = {"fixed": 0, "adaptive": 1, "cost": 2}


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

    # generate(logprobs=N) sets it: one (logprob, [(id, logprob), ...]) per generated token.
    logprobs = None

    @property
    def acceptance_rate(self) -> float:
        """Guesses accepted / guesses proposed (0 when none were)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Tokens emitted per target forward pass (1 for plain decoding)."""
        return self.emitted / self.passes if self.passes else 0.0

    @property
    def stop_reason(self) -> str:
        """"max_tokens", "end_of_generation", "stop_string", "context_full" or "cancelled"."""
        return _STOP[self.stop] if 0 <= self.stop < len(_STOP) else str(self.stop)

    def __repr__(self):
        return (f"Stats(emitted={self.emitted}, passes={self.passes}, proposed={self.proposed}, "
                f"accepted={self.accepted}, stop={self.stop_reason!r})")


class GenResult(ctypes.Structure):
    """What Session.gen() did: `stats` (a Stats: emitted, passes, proposed, accepted, stop_reason),
    the forced guesses among the proposed and accepted ones, the ids it added to the session, and
    whether the generated text is a complete sentence of its constraint."""

    _fields_ = [
        ("stats", Stats),
        ("forced_proposed", ctypes.c_int64),
        ("forced_accepted", ctypes.c_int64),
        ("n_tokens", ctypes.c_int64),
        ("text_bytes", ctypes.c_size_t),
        ("_complete", ctypes.c_int),
    ]

    @property
    def complete(self) -> bool:
        return bool(self._complete)

    def __repr__(self):
        return (f"GenResult(n_tokens={self.n_tokens}, passes={self.stats.passes}, proposed={self.stats.proposed}, "
                f"accepted={self.stats.accepted}, forced_proposed={self.forced_proposed}, "
                f"forced_accepted={self.forced_accepted}, stop_reason={self.stats.stop_reason!r}, "
                f"complete={self.complete})")


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


class _KvShape(ctypes.Structure):
    _fields_ = [
        ("n_layer", ctypes.c_int64),
        ("n_head_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("hf_keys_permuted", ctypes.c_int),
        ("architecture", ctypes.c_char_p),
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
    "rewind_model_kv_shape": (ctypes.c_int, [_P, ctypes.POINTER(_KvShape)]),
    "rewind_cache_import_hf": (ctypes.c_int, [_P, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P),
                                              ctypes.POINTER(_P), ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64,
                                              ctypes.c_int64, _tok_p, ctypes.c_size_t, ctypes.POINTER(_P)]),
    "rewind_cache_n_positions": (ctypes.c_int64, [_P]),
    "rewind_cache_export_hf": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(_P), ctypes.POINTER(_P),
                                              ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
    "rewind_append": (ctypes.c_int, [_P, _P, _tok_p, ctypes.c_size_t]),
    "rewind_append_text": (ctypes.c_int, [_P, _P, ctypes.c_char_p, ctypes.c_size_t]),
    "rewind_gen": (ctypes.c_int, [_P, _P, ctypes.POINTER(GenerateOptions), ctypes.POINTER(_SpecOptions), ctypes.POINTER(GenResult)]),
    "rewind_gen_text": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
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


_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def _ids(tokens, what="token ids"):
    """Token ids as a C int32 array and their count. A 1-D (or [1, n]) numpy array of int32 in C
    order is passed as it is (no copy; the returned array keeps it alive); other integer arrays,
    lists and tuples are converted. Anything else (floats, bools, several rows, ids outside
    int32) raises ArgumentError naming `what`; an id outside the vocabulary is the C API's
    ArgumentError."""
    np = _numpy()
    if np is not None and not isinstance(tokens, np.ndarray) and hasattr(tokens, "detach") and hasattr(tokens, "numpy"):
        tokens = _as_numpy(tokens, what)  # a torch tensor (transformers' input_ids)
    if isinstance(tokens, (list, tuple)) and len(tokens) == 1 and (
            isinstance(tokens[0], (list, tuple)) or np is not None and isinstance(tokens[0], np.ndarray)):
        tokens = tokens[0]  # [[ids]]: one row, as transformers' [1, n] input_ids
    if np is not None and isinstance(tokens, np.ndarray):
        a = tokens
        if a.ndim == 2 and a.shape[0] == 1:
            a = a[0]
        if a.ndim != 1:
            raise ArgumentError(f"{what}: an array of shape {tokens.shape}; expected [n] or [1, n]")
        if a.dtype.kind not in "iu":
            raise ArgumentError(f"{what}: dtype {a.dtype}; expected an integer array")
        if a.size and (int(a.min()) < _INT32_MIN or int(a.max()) > _INT32_MAX):
            raise ArgumentError(f"{what}: an id outside int32")
        if a.dtype != np.int32 or not a.flags.c_contiguous:
            a = np.ascontiguousarray(a, dtype=np.int32)
        return _IdArray(a, a.ctypes.data_as(_tok_p)), int(a.size)
    if isinstance(tokens, (str, bytes)):
        raise ArgumentError(f"{what}: a {type(tokens).__name__}; expected ids (a list or numpy array of ints)")
    tokens = list(tokens)
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int) and not (np is not None and isinstance(t, np.integer)):
            raise ArgumentError(f"{what}: element {i} is a {type(t).__name__}, not an int")
        if not _INT32_MIN <= int(t) <= _INT32_MAX:
            raise ArgumentError(f"{what}: element {i} ({int(t)}) is outside int32")
    return (ctypes.c_int32 * len(tokens))(*[int(t) for t in tokens]), len(tokens)


class _IdArray:
    """A numpy int32 array's data pointer, as ctypes takes it, kept with the array it points into."""

    def __init__(self, array, pointer):
        self._array = array
        self._as_parameter_ = pointer


def _c_strings(strings):
    encoded = [s.encode("utf-8") for s in strings]
    return (ctypes.c_char_p * len(encoded))(*encoded), len(encoded)


def version() -> str:
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.rewind_version().decode()


def _numpy():
    """numpy if it can be imported, else None (rewind never needs it)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _require_numpy(what):
    np = _numpy()
    if np is None:
        raise UnsupportedError(f"{what} needs numpy (Debian: apt-get install python3-numpy)")
    return np


def _as_numpy(x, what):
    """A numpy array for `x`: numpy arrays as they are, torch CPU tensors through .numpy() (no copy)."""
    np = _require_numpy(what)
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor, without importing torch
        try:
            return x.detach().cpu().numpy()
        except Exception as e:  # noqa: BLE001 - reported as what it is
            raise ArgumentError(f"{what}: cannot be read as a numpy array ({e})") from e
    raise ArgumentError(f"{what}: a {type(x).__name__}; expected a numpy array")


def _hf_arrays(past_key_values):
    """Checks a Hugging Face past_key_values as far as Python can (the C API checks it against the
    model): per-layer (key, value) arrays, all [1, H, T, D], one dtype, C-contiguous. Returns the
    keys, the values (3-D views [H, T, D]), the dtype name and (H, T, D)."""
    np = _require_numpy("past_key_values")
    pkv = past_key_values
    if hasattr(pkv, "to_legacy_cache"):  # transformers' DynamicCache and friends
        pkv = pkv.to_legacy_cache()
    if isinstance(pkv, (str, bytes)) or not hasattr(pkv, "__len__"):
        raise ArgumentError(f"past_key_values: a {type(pkv).__name__}; expected a sequence of per-layer "
                            "(key, value) arrays")
    keys, values, dtype, dims = [], [], None, None
    for i, layer in enumerate(pkv):
        if isinstance(layer, (str, bytes)) or not hasattr(layer, "__len__") or len(layer) != 2:
            raise ArgumentError(f"past_key_values[{i}]: expected a (key, value) pair")
        for name, x, out in (("key", layer[0], keys), ("value", layer[1], values)):
            what = f"past_key_values[{i}] {name}"
            a = _as_numpy(x, what)
            if a.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
                raise ArgumentError(f"{what}: dtype {a.dtype}; expected float32 or float16 (native byte order)")
            if dtype is None:
                dtype = a.dtype
            elif a.dtype != dtype:
                raise ArgumentError(f"{what}: dtype {a.dtype}, but past_key_values[0] key is {dtype}")
            if a.ndim != 4:
                raise ShapeError(f"{what}: shape {a.shape}; expected [1, n_kv_heads, seq_len, head_dim]")
            if a.shape[0] != 1:
                raise ShapeError(f"{what}: batch {a.shape[0]}; rewind runs one sequence (batch 1)")
            if dims is None:
                dims = a.shape[1:]
            elif a.shape[1:] != dims:
                raise ShapeError(f"{what}: shape {a.shape}, but past_key_values[0] key is {(1,) + tuple(dims)}")
            if not a.flags.c_contiguous or not a.flags.aligned:
                raise ArgumentError(f"{what}: strides {a.strides} are not a C-contiguous aligned layout "
                                    "(numpy.ascontiguousarray makes one)")
            out.append(a[0])
    if dims is None:
        shape = (0, 0, 0)
    else:
        shape = tuple(int(d) for d in dims)
    return keys, values, str(dtype) if dtype is not None else "float32", shape


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


class KvShape(NamedTuple):
    """What a model's past_key_values look like: n_layer pairs of [1, n_head_kv, seq_len, head_dim]
    arrays; hf_keys_permuted says whether a key row is permuted between Hugging Face's layout and
    the GGUF file's (llama files), which rewind undoes on import and export."""

    n_layer: int
    n_head_kv: int
    head_dim: int
    hf_keys_permuted: bool
    architecture: str


class Model:
    """A GGUF model, read-only; any number of contexts and caches may share it.

    close() (or leaving a `with` block) releases it; contexts and caches made from it keep what
    they need alive and go on running (rewind.generate), while calls that need the Model itself
    (tokenize, detokenize, text, kv_shape, generate) raise StateError."""

    def __init__(self, path: "str | os.PathLike"):
        self._hh = None
        h = _P()
        _check(_lib.rewind_model_load(os.fsencode(path), ctypes.byref(h)))
        self._hh = h
        self.path = path

    @property
    def _h(self):
        if self._hh is None:
            raise StateError(f"the model {self.path!s} is closed")
        return self._hh

    @property
    def closed(self) -> bool:
        return getattr(self, "_hh", None) is None

    def close(self) -> None:
        """Releases the model (what was made from it stays usable); later calls raise StateError."""
        h, self._hh = getattr(self, "_hh", None), None
        if h:
            _lib.rewind_model_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        self.close()

    @property
    def n_vocab(self) -> int:
        return _lib.rewind_model_n_vocab(self._h)

    @property
    def n_ctx(self) -> int:
        return _lib.rewind_model_n_ctx(self._h)

    @property
    def bos_token_id(self) -> "int | None":
        t = _lib.rewind_model_bos(self._h)
        return None if t < 0 else t

    @property
    def eos_token_id(self) -> "int | None":
        t = _lib.rewind_model_eos(self._h)
        return None if t < 0 else t

    @property
    def kv_shape(self) -> KvShape:
        """The shape of this model's past_key_values (rewind.KvShape)."""
        out = _KvShape()
        _check(_lib.rewind_model_kv_shape(self._h, ctypes.byref(out)))
        return KvShape(out.n_layer, out.n_head_kv, out.head_dim, bool(out.hf_keys_permuted),
                       out.architecture.decode())

    def generate(self, input_ids, **kwargs) -> "np.ndarray | GenerateOutput":
        """rewind.generate_hf(self, input_ids, **kwargs): generation with transformers' argument
        names (past_key_values, max_new_tokens, do_sample, temperature, top_p, top_k,
        prompt_lookup_num_tokens, assistant_model, return_dict_in_generate, ...); see there."""
        return generate_hf(self, input_ids, **kwargs)

    def stream(self, input_ids, text: bool = False, **kwargs) -> "Stream":
        """A Stream of what generate() would produce, each token as it is decided: token ids, or
        text pieces with text=True; arguments as generate()'s (not return_dict_in_generate or
        streamer). Break out of the loop to stop. stream.sequences, once it ended, is the [1, n]
        array generate() would have returned for the tokens taken."""
        return stream_hf(self, input_ids, text=text, **kwargs)

    def tokenize(self, text: str, add_bos: "bool | None" = None) -> "list[int]":
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

    def detokenize(self, tokens) -> str:
        """The text of `tokens` (ids as a list or numpy array)."""
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
    def capacity(self) -> int:
        """Positions the cache can hold."""
        return _lib.rewind_cache_capacity(self._h)

    def tokens(self) -> "list[int]":
        """The sequence's ids (the newest one held back, its K/V not in the cache yet)."""
        n = ctypes.c_size_t(len(self))
        buf = (ctypes.c_int32 * max(n.value, 1))()
        _check(_lib.rewind_cache_tokens(self._h, buf, n.value, ctypes.byref(n)))
        return list(buf[: n.value])

    def truncate(self, n: int) -> None:
        """Keeps the first n tokens (O(1))."""
        _settle(self)
        _check(_lib.rewind_cache_truncate(self._h, n))

    def save(self, path: "str | os.PathLike") -> None:
        """Writes the KV cache to `path` and its ids to `path` + ".ids" (one per line)."""
        _settle(self)
        _check(_lib.rewind_cache_save(self._h, os.fsencode(path)))
        with open(str(path) + ".ids", "w") as f:
            f.write("\n".join(str(t) for t in self.tokens()))

    @classmethod
    def load(cls, model: "Model", path: "str | os.PathLike", capacity: int = 0, kv_f16: bool = False) -> "Cache":
        """A cache read from a file Cache.save wrote (and its ids from path + ".ids")."""
        with open(str(path) + ".ids") as f:
            ids = [int(line) for line in f.read().split()]
        arr, count = _ids(ids)
        h = _P()
        _check(_lib.rewind_cache_load(model._h, os.fsencode(path), capacity, int(kv_f16), arr, count, ctypes.byref(h)))
        return cls(model, _handle=h)

    @property
    def n_positions(self) -> int:
        """Positions whose K/V the cache holds: len(cache) - 1 (the newest token is held back)."""
        return _lib.rewind_cache_n_positions(self._h)

    @classmethod
    def from_past_key_values(cls, model: Model, past_key_values, tokens, capacity: int = 0,
                             kv_f16: bool = False) -> "Cache":
        """A cache holding `tokens` whose K/V is a Hugging Face cache: `past_key_values` is a
        sequence of per-layer (key, value) numpy arrays shaped [1, n_kv_heads, seq_len, head_dim]
        (float32 or float16, C-contiguous, keys after rope as transformers stores them; a
        transformers Cache object with to_legacy_cache() and torch CPU tensors are taken too).
        `tokens` are the ids of those seq_len positions, optionally followed by the next one (the
        token whose logits come next); with exactly seq_len ids the last position's K/V is
        dropped and its token runs again with the next call (the same K/V comes out). llama files'
        key rows are un-permuted as the GGUF converter permuted them (Model.kv_shape).

        Refused with a rewind.Error subclass naming what, nothing made: ArgumentError (not a
        sequence of pairs, a dtype other than float32/float16, mixed dtypes, a non-contiguous or
        wrongly strided array, batch other than 1, a non-finite value, an id outside the
        vocabulary), ShapeError (arrays that disagree with each other, or a layer count, KV
        head count or head dimension other than the model's), StateError (a token count other
        than seq_len or seq_len + 1; a closed model), CapacityError (more tokens than `capacity`
        or the model's context)."""
        keys, values, dtype, (n_head_kv, seq_len, head_dim) = _hf_arrays(past_key_values)
        code = 0 if dtype == "float32" else 1
        arr, count = _ids(tokens, "tokens")
        n = len(keys)
        kp = (_P * max(n, 1))(*[k.ctypes.data for k in keys])
        vp = (_P * max(n, 1))(*[v.ctypes.data for v in values])
        h = _P()
        _check(_lib.rewind_cache_import_hf(model._h, capacity, int(kv_f16), code, kp, vp, n, n_head_kv, seq_len,
                                           head_dim, arr, count, ctypes.byref(h)))
        return cls(model, _handle=h)

    def to_past_key_values(self, dtype: str = "float32") -> "Tuple[Tuple[np.ndarray, np.ndarray], ...]":
        """The cache's K/V in Hugging Face's layout: one (key, value) pair of new numpy arrays
        [1, n_kv_heads, n_positions, head_dim] per layer, of `dtype` ("float32" or "float16"),
        covering every token but the newest (as transformers' cache after generate covers
        sequences[:, :-1]). What from_past_key_values imported comes back exactly when the cache
        stores at least its precision."""
        np = _require_numpy("Cache.to_past_key_values")
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float16)):
            raise ArgumentError(f"to_past_key_values: dtype {dt}; expected float32 or float16")
        _settle(self)
        shape = self.model.kv_shape if not self.model.closed else None
        if shape is None:
            raise StateError(f"to_past_key_values: the model {self.model.path!s} is closed")
        n = self.n_positions
        keys = [np.empty((1, shape.n_head_kv, n, shape.head_dim), dtype=dt) for _ in range(shape.n_layer)]
        values = [np.empty_like(k) for k in keys]
        kp = (_P * max(shape.n_layer, 1))(*[k.ctypes.data for k in keys])
        vp = (_P * max(shape.n_layer, 1))(*[v.ctypes.data for v in values])
        _check(_lib.rewind_cache_export_hf(self._h, 0 if dt == np.float32 else 1, kp, vp, shape.n_layer,
                                           shape.n_head_kv, n, shape.head_dim))
        return tuple(zip(keys, values))


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


def _options(max_tokens, temperature, seed, stop, stop_at_eog, keep, top_k=0, top_p=1.0):
    o = _lib.rewind_generate_default_options()
    o.max_tokens = max_tokens
    o.temperature = temperature
    o.top_k = top_k
    o.top_p = top_p
    o.seed = seed
    o.stop_at_eog = int(stop_at_eog)
    if stop:
        arr, n = _c_strings(stop)
        keep.append(arr)
        o.stop_strings = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
        o.n_stop_strings = n
    return o


def _spec(source, k, adaptive, references, draft, keep, tree=0, k_policy=None):
    """The C speculation options. k_policy: "fixed", "adaptive" or "cost" (None: adaptive when
    `adaptive`, else fixed); tree: continuations per node (1: chains, 0: the source's own)."""
    spec = _lib.rewind_spec_default_options()
    spec.source = source.encode()
    spec.k = k
    if k_policy is None:
        k_policy = "adaptive" if adaptive else "fixed"
    if k_policy not in _K_POLICIES:
        raise ArgumentError(f"k_policy must be one of {', '.join(_K_POLICIES)}, not {k_policy!r}")
    spec.k_policy = _K_POLICIES[k_policy]
    if not isinstance(tree, int) or isinstance(tree, bool):
        raise ArgumentError(f"tree must be an int (continuations per node), not {tree!r}")
    spec.branches = tree
    if references:
        arr, count = _c_strings(references)
        keep.append(arr)
        spec.references = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
        spec.n_references = count
    spec.draft = draft._h if draft is not None else None
    return spec


def _penalties(opts, keep, frequency_penalty=0.0, presence_penalty=0.0, logit_bias=None):
    """Sets the C options' frequency/presence penalties and logit_bias ({id: bias})."""
    opts.frequency_penalty = frequency_penalty
    opts.presence_penalty = presence_penalty
    if logit_bias:
        items = sorted(logit_bias.items())
        ids = (ctypes.c_int32 * len(items))(*[int(t) for t, _ in items])
        vals = (ctypes.c_float * len(items))(*[float(b) for _, b in items])
        keep += [ids, vals]
        opts.logit_bias_tokens = ids
        opts.logit_bias_values = vals
        opts.n_logit_bias = len(items)


_JSON_WHITESPACE = {"compact": 0, "free": 1}


def _constraint(opts, keep, grammar=None, json_schema=None, regex=None, json_whitespace="compact"):
    """Sets the C options' constraint: a GBNF grammar (str), a JSON Schema (a dict, or its JSON
    text) or a regex (str); at most one (the C API refuses two, naming them)."""
    if json_whitespace not in _JSON_WHITESPACE:
        raise ArgumentError(f"json_whitespace must be one of {', '.join(_JSON_WHITESPACE)}, not {json_whitespace!r}")
    opts.json_whitespace = _JSON_WHITESPACE[json_whitespace]
    if json_schema is not None and not isinstance(json_schema, str):
        if not isinstance(json_schema, (dict, bool)):
            raise ArgumentError(f"json_schema must be a dict, a bool or JSON text, not {type(json_schema).__name__}")
        json_schema = json.dumps(json_schema)
    for field, value in (("grammar", grammar), ("json_schema", json_schema), ("regex", regex)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise ArgumentError(f"{field} must be a str, not {type(value).__name__}")
        data = value.encode()
        keep.append(data)
        setattr(opts, field, data)


def _logprobs_buffers(opts, keep, max_tokens, top_n, processed):
    """Caller-owned logprobs buffers for max_tokens tokens, hooked into `opts`."""
    if not isinstance(top_n, int) or isinstance(top_n, bool):
        raise ArgumentError(f"logprobs must be an int (alternatives per token, 0..20), not {top_n!r}")
    n = max(max_tokens, 1)
    lp = _Logprobs()
    lp.top_n = top_n
    lp.processed = int(processed)
    bufs = [(ctypes.c_float * n)(), (ctypes.c_int32 * (n * max(top_n, 1)))(), (ctypes.c_float * (n * max(top_n, 1)))()]
    lp.logprob, lp.top_tokens, lp.top_logprobs = bufs
    keep += bufs + [lp]
    opts.logprobs = ctypes.pointer(lp)
    return lp


def _read_logprobs(lp, n_tokens):
    """[(logprob, [(id, logprob), ...]), ...] for the first n_tokens tokens."""
    k = lp.top_n
    return [(lp.logprob[i], [(lp.top_tokens[i * k + j], lp.top_logprobs[i * k + j]) for j in range(k)
                             if lp.top_tokens[i * k + j] >= 0]) for i in range(n_tokens)]


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


def generate(ctx: "Context", cache: "Cache", max_tokens: int = 128, source: "str | None" = None, k: int = 4,
             adaptive: bool = False, references: "Sequence[str]" = (), draft: "Model | None" = None,
             temperature: float = 0.0, seed: int = 0, stop: "Sequence[str]" = (), stop_at_eog: bool = True,
             on_token=None, top_k: int = 0, top_p: float = 1.0, tree: int = 0,
             k_policy: "str | None" = None, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
             logit_bias: "dict | None" = None, logprobs: "int | None" = None,
             logprobs_processed: bool = False, grammar: "str | None" = None, json_schema=None,
             regex: "str | None" = None, json_whitespace: str = "compact") -> "Tuple[list[int], Stats]":
    """Generates from the sequence in `cache`; the ids are appended to it and returned with the
    Stats. source None decodes plainly; "ngram", "ref", "draft", "auto" or "suffix" speculates
    (same tokens: speculation is lossless). tree > 1 lets the source propose token trees of up
    to that many continuations per node, verified in one pass (1: chains; 0: the source's own,
    which is a tree for "suffix"). k_policy "cost" keeps, of at most k guesses, those whose
    chance to stand pays for the time their rows add ("fixed", "adaptive": see the C API).

    on_token: called with each token id as it is decided (before this returns); returning False
    stops the generation after that token (Stats.stop_reason "cancelled"), None or True goes on.
    An exception it raises stops the generation too and is raised from here, the tokens so far
    kept in the cache.

    frequency_penalty, presence_penalty (OpenAI's, in [-2, 2]) and logit_bias ({id: bias in
    [-100, 100]}) penalise as the C API does. logprobs N (0..20) sets Stats.logprobs to one
    (logprob, [(id, logprob), ... N alternatives]) per generated token, the model's log-softmax
    (or, with logprobs_processed, the distribution after penalties, bias and temperature): the
    same values with or without speculation.

    grammar (GBNF text), json_schema (a dict or JSON text) or regex (at most one) holds the output
    to that language, exactly under speculation (docs/structured-output.md): generation ends with
    stop_reason "end_of_generation" only on a complete sentence; json_whitespace "compact" (none)
    or "free"."""
    _settle(ctx, cache)
    keep = []
    opts = _options(max_tokens, temperature, seed, stop, stop_at_eog, keep, top_k, top_p)
    _penalties(opts, keep, frequency_penalty, presence_penalty, logit_bias)
    _constraint(opts, keep, grammar, json_schema, regex, json_whitespace)
    lp = _logprobs_buffers(opts, keep, max_tokens, logprobs, logprobs_processed) if logprobs is not None else None
    spec = _spec(source, k, adaptive, references, draft, keep, tree, k_policy) if source is not None else None
    errors = []
    if on_token is not None:
        cb = _token_callback(on_token, errors)
        keep.append(cb)
        opts.on_token = cb
    result = _run(ctx, cache, max_tokens, opts, spec)
    if errors:
        raise errors[0]
    if lp is not None:
        result[1].logprobs = _read_logprobs(lp, len(result[0]))
    return result


def next_logits(ctx: "Context", cache: "Cache", out: "np.ndarray | None" = None) -> "np.ndarray | list[float]":
    """The logits of the next position: the scores (one per vocabulary id, before temperature,
    penalties and filters) the next generated token is chosen from, computed on `ctx`; greedy
    decoding takes their argmax. The cache is left as it was. A numpy float32 array [n_vocab]
    when numpy can be imported, else a list of floats. Error("state") for an empty cache.

    The scores live in the context's buffer, which its next run overwrites, so they are copied
    once (one memcpy) into a new array, or into `out` when given: a writable C-contiguous float32
    numpy array of n_vocab elements, reused from call to call without allocating (it is
    returned). A wrong `out` raises ArgumentError before anything runs."""
    np = _numpy()
    if out is not None:
        if np is None or not isinstance(out, np.ndarray):
            raise ArgumentError("next_logits: out must be a numpy float32 array")
        n_vocab = ctx.model.n_vocab
        if out.dtype != np.float32 or out.shape != (n_vocab,) or not out.flags.c_contiguous or not out.flags.writeable:
            raise ArgumentError(f"next_logits: out is {out.dtype} {out.shape} (contiguous {out.flags.c_contiguous}, "
                                f"writeable {out.flags.writeable}); expected a writable C-contiguous float32 "
                                f"array of shape ({n_vocab},)")
    _settle(ctx, cache)
    p = ctypes.POINTER(ctypes.c_float)()
    n = ctypes.c_size_t(0)
    _check(_lib.rewind_next_logits(ctx._h, cache._h, ctypes.byref(p), ctypes.byref(n)))
    if np is not None:
        view = np.ctypeslib.as_array(p, shape=(n.value,))  # the context's buffer: copied out now
        if out is None:
            return view.copy()
        out[...] = view
        return out
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
    raised from the iteration; a bad constraint too (its type is checked here), before anything runs.

    Options as rewind.generate's but on_token and logprobs: grammar, json_schema or regex (at
    most one) and json_whitespace hold the tokens to that language as there, and the penalties
    and logit_bias apply as there; the same ids, with or without speculation."""

    def __init__(self, ctx, cache, max_tokens=128, source=None, k=4, adaptive=False, references=(), draft=None,
                 temperature=0.0, seed=0, stop=(), stop_at_eog=True, text=False, top_k=0, top_p=1.0, tree=0,
                 k_policy=None, grammar=None, json_schema=None, regex=None, json_whitespace="compact",
                 frequency_penalty=0.0, presence_penalty=0.0, logit_bias=None):
        _settle(ctx, cache)
        self.tokens = []
        self.stats = None
        self.prompt_ids = None
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
        opts = _options(max_tokens, temperature, seed, stop, stop_at_eog, keep, top_k, top_p)
        _penalties(opts, keep, frequency_penalty, presence_penalty, logit_bias)
        _constraint(opts, keep, grammar, json_schema, regex, json_whitespace)
        spec = _spec(source, k, adaptive, references, draft, keep, tree, k_policy) if source is not None else None
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
    def sequences(self):
        """The input ids and the tokens generated so far as an int64 numpy array [1, n] (streams
        from Model.stream; other streams: the generated tokens only)."""
        np = _require_numpy("Stream.sequences")
        return np.asarray([list(self.prompt_ids or []) + self.tokens], dtype=np.int64)

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


def stream(ctx: "Context", cache: "Cache", max_tokens: int = 128, **kw) -> "Stream":
    """A Stream of the token ids rewind.generate(ctx, cache, max_tokens, **kw) would return, each
    as it is decided (keyword arguments as generate's, but on_token):

        for token in rewind.stream(ctx, cache, 64, source="ngram"):
            if token == newline:
                break  # stops the generation; the tokens so far stay in the cache
    """
    return Stream(ctx, cache, max_tokens, **kw)


class GenerateOutput:
    """What Model.generate(..., return_dict_in_generate=True) returns, as transformers' output:
    `sequences` ([1, n] int64: the input ids and the generated ones), `past_key_values` (the K/V of
    sequences[:, :-1] in Hugging Face's layout when use_cache=True, else None) and rewind's
    speculation statistics: `stats` (rewind.Stats: emitted, passes, proposed, accepted,
    stop_reason, timings), `scores` (with output_scores=True: one [1, n_vocab] float32 array per
    generated token, see generate_hf; else None), with `num_passes`, `num_proposed_tokens`, `num_accepted_tokens` and
    `acceptance_rate` for short."""

    def __init__(self, sequences, past_key_values, stats, scores=None):
        self.sequences = sequences
        self.past_key_values = past_key_values
        self.stats = stats
        self.scores = scores

    @property
    def num_passes(self) -> int:
        return self.stats.passes

    @property
    def num_proposed_tokens(self) -> int:
        return self.stats.proposed

    @property
    def num_accepted_tokens(self) -> int:
        return self.stats.accepted

    @property
    def acceptance_rate(self) -> float:
        return self.stats.acceptance_rate

    def __getitem__(self, key):  # output["sequences"], as transformers' ModelOutput allows
        return getattr(self, key)

    def __repr__(self):
        pkv = "None" if self.past_key_values is None else f"<{len(self.past_key_values)} layers>"
        return f"GenerateOutput(sequences={self.sequences!r}, past_key_values={pkv}, stats={self.stats!r})"


# Arguments of transformers' generate() that rewind takes at their default value only.
_HF_DEFAULT_ONLY = {"num_beams": 1, "num_return_sequences": 1, "output_logits": False,
                    "output_attentions": False, "output_hidden_states": False, "pad_token_id": None,
                    "generation_config": None}


def _hf_prepare(model, input_ids, past_key_values, max_new_tokens, max_length, do_sample, temperature, top_p, top_k,
                seed, prompt_lookup_num_tokens, assistant_model, num_assistant_tokens, reference_texts,
                attention_mask, stop_strings, stop_at_eog, capacity, kv_f16, n_threads, extra):
    """What generate_hf and stream_hf share: the checked arguments, a context, and a cache that
    holds input_ids (past_key_values imported for its first tokens, the rest run). Returns
    (ctx, cache, ids, max_tokens, keyword arguments for generate/Stream, the K/V dtype)."""
    np = _require_numpy("generate")
    extra = dict(extra)
    tree = extra.pop("tree", 0)  # rewind's extension: token trees of the guess sources
    for key, value in extra.items():
        if key not in _HF_DEFAULT_ONLY:
            raise ArgumentError(f"generate: unknown argument {key!r}")
        if value != _HF_DEFAULT_ONLY[key]:
            raise UnsupportedError(f"generate: {key}={value!r} is not supported by rewind "
                                   f"(only {_HF_DEFAULT_ONLY[key]!r})")
    model._h  # noqa: B018 - StateError on a closed model before anything else
    arr, n = _ids(input_ids, "input_ids")
    ids = list(arr._array) if isinstance(arr, _IdArray) else list(arr)
    ids = [int(t) for t in ids]
    if n == 0:
        raise ArgumentError("generate: input_ids is empty")
    if attention_mask is not None:
        mask = np.asarray(attention_mask).reshape(-1)
        if mask.shape != (n,) or not bool(np.all(mask == 1)):
            raise UnsupportedError("generate: attention_mask must be all ones over input_ids (rewind runs one "
                                   "unpadded sequence)")
    if max_new_tokens is None:
        max_new_tokens = max(0, max_length - n) if max_length is not None else 20
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ArgumentError(f"generate: max_new_tokens must be an int >= 0, not {max_new_tokens!r}")
    if do_sample:
        if temperature is None or not temperature > 0:
            raise ArgumentError(f"generate: do_sample=True needs temperature > 0, not {temperature!r}")
        sampling = {"temperature": float(temperature), "top_k": int(top_k or 0),
                    "top_p": 1.0 if top_p is None else float(top_p)}
    else:
        sampling = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}  # greedy, as transformers ignores them
    if seed is None:
        seed = 0
    # The guess sources transformers' names map to; several together: "auto" (the longest guess wins).
    names = []
    if prompt_lookup_num_tokens:
        names.append("ngram")
    if assistant_model is not None:
        if not isinstance(assistant_model, Model):
            raise ArgumentError(f"generate: assistant_model is a {type(assistant_model).__name__}; expected a "
                                "rewind.Model (a GGUF draft with this model's vocabulary)")
        names.append("draft")
    references = ()
    if reference_texts is not None:
        if isinstance(reference_texts, str):
            reference_texts = [reference_texts]
        references = tuple(reference_texts)
        if not all(isinstance(r, str) for r in references):
            raise ArgumentError("generate: reference_texts must be a str or a list of str")
        if references:
            names.append("ref")
    spec = {}
    if names:
        k = prompt_lookup_num_tokens or num_assistant_tokens or 8
        spec = {"source": names[0] if len(names) == 1 else "auto", "k": int(min(k, 255)), "references": references,
                "draft": assistant_model, "tree": tree}
    elif tree:
        raise ArgumentError("generate: tree needs a guess source (prompt_lookup_num_tokens, assistant_model or "
                            "reference_texts)")
    stop = ()
    if stop_strings is not None:
        stop = (stop_strings,) if isinstance(stop_strings, str) else tuple(stop_strings)
    ctx = Context(model, n_threads=n_threads)
    pkv_dtype = "float32"
    if past_key_values is not None:
        keys, _, pkv_dtype, (_, seq_len, _) = _hf_arrays(past_key_values)
        if keys and seq_len > n:
            raise ShapeError(f"generate: past_key_values covers {seq_len} tokens but input_ids has only {n}; "
                             "input_ids must hold the whole sequence, past_key_values its first tokens")
        seq_len = seq_len if keys else 0
        head = ids[: seq_len + 1]
        cache = Cache.from_past_key_values(model, past_key_values, head, capacity=capacity, kv_f16=kv_f16)
        rest = ids[len(head):]
    else:
        cache = Cache(model, capacity, kv_f16=kv_f16)
        rest = ids
    if rest:
        rarr, rn = _ids(rest)
        _check(_lib.rewind_append(ctx._h, cache._h, rarr, rn))
    kw = dict(sampling, seed=seed, stop=stop, stop_at_eog=stop_at_eog, **spec)
    return ctx, cache, ids, max_new_tokens, kw, pkv_dtype


def generate_hf(model: "Model", input_ids, max_new_tokens: "int | None" = None, past_key_values=None,
                do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 50,
                seed: int = 0, prompt_lookup_num_tokens: "int | None" = None, assistant_model: "Model | None" = None,
                num_assistant_tokens: "int | None" = None, reference_texts: "Sequence[str] | str | None" = None,
                return_dict_in_generate: bool = False, use_cache: bool = True, max_length: "int | None" = None,
                attention_mask=None, streamer=None, stop_strings: "Sequence[str] | str | None" = None,
                stop_at_eog: bool = True, capacity: int = 0, kv_f16: bool = False, n_threads: int = 1,
                grammar: "str | None" = None, json_schema=None, regex: "str | None" = None,
                json_whitespace: str = "compact", output_scores: bool = False,
                **kwargs) -> "np.ndarray | GenerateOutput":
    """Generation as transformers' model.generate() names it (Model.generate calls this).

    input_ids: the whole sequence so far ([1, n] or [n]; numpy, a list, or a torch CPU tensor).
    past_key_values: optional, a Hugging Face cache (per-layer (key, value) arrays
    [1, n_kv_heads, seq_len, head_dim], float32/float16; Cache.from_past_key_values) covering the
    first seq_len <= n tokens of input_ids: only the rest is run, as in transformers.
    max_new_tokens: tokens to generate at most (None: max_length - n if max_length is given,
    else 20). Generation also ends at the model's end-of-generation tokens (stop_at_eog=False
    keeps going), after the token completing one of stop_strings, or when the cache is full.
    do_sample=False: greedy (temperature, top_p, top_k ignored, as transformers does). True:
    sampling with temperature, top_k (0: off; transformers' default 50) and top_p, reproducible
    by `seed` (rewind keys its randomness by seed and position).
    Speculation, lossless (the output equals plain decoding with the same settings):
    prompt_lookup_num_tokens=K guesses K tokens by n-gram lookup in the sequence ("ngram");
    assistant_model=draft (a rewind.Model sharing the vocabulary) guesses with a draft model
    (num_assistant_tokens per pass, default 8); reference_texts=[...] copies guesses from
    documents ("ref"); given together they form rewind's "auto" source. tree=B (rewind's
    extension) lets them propose token trees of up to B continuations per node, verified in one
    pass (still lossless).
    Returns the sequences, an int64 numpy array [1, n + generated]; with
    return_dict_in_generate=True a GenerateOutput: .sequences, .past_key_values (the K/V of
    sequences[:, :-1], in the dtype of the past_key_values given or float32; None when
    use_cache=False) and speculation statistics (.stats).
    streamer: an object with put() and end() (as transformers' streamers): put() gets the input
    ids, then each generated id as a [1] array as soon as it is decided; end() follows the last.
    rewind's own options: capacity (cache positions, 0: the model's context up to 4096), kv_f16,
    n_threads; grammar (GBNF), json_schema (a dict or JSON text) or regex (at most one) hold the
    generated text to that language (json_whitespace "compact" or "free"), exactly under
    speculation. output_scores=True (with return_dict_in_generate=True) sets `.scores`, as
    transformers: one [1, n_vocab] float32 array per generated token, from the pass that decided
    it, the same values with or without speculation. They are the processed log-probabilities
    generate(logprobs=20, logprobs_processed=True) reports (Stats.logprobs holds the same): the
    distribution after the constraint's mask, penalties and temperature (greedy: 1), before
    top-k/top-p, log-softmaxed (transformers' scores are those logits before the log-softmax, so
    each row's argmax and softmax agree); filled for the chosen token and the 20 most likely, the
    rest -inf. attention_mask is taken when all ones; num_beams, num_return_sequences and
    output_logits, output_attentions, output_hidden_states only at their defaults. Errors: rewind.Error subclasses (ArgumentError for an unknown
    argument or a bad value, UnsupportedError for beams and the like, ShapeError and the others of
    Cache.from_past_key_values for past_key_values)."""
    np = _require_numpy("generate")
    ctx, cache, ids, max_tokens, kw, pkv_dtype = _hf_prepare(
        model, input_ids, past_key_values, max_new_tokens, max_length, do_sample, temperature, top_p, top_k, seed,
        prompt_lookup_num_tokens, assistant_model, num_assistant_tokens, reference_texts, attention_mask,
        stop_strings, stop_at_eog, capacity, kv_f16, n_threads, kwargs)
    on_token = None
    if streamer is not None:
        streamer.put(np.asarray([ids], dtype=np.int64))

        def on_token(token):
            streamer.put(np.asarray([token], dtype=np.int64))
    if output_scores:
        kw.update(logprobs=_MAX_TOP_LOGPROBS, logprobs_processed=True)
    out, stats = generate(ctx, cache, max_tokens, on_token=on_token, grammar=grammar, json_schema=json_schema,
                          regex=regex, json_whitespace=json_whitespace, **kw)
    if streamer is not None:
        streamer.end()
    sequences = np.asarray([ids + out], dtype=np.int64)
    if not return_dict_in_generate:
        return sequences
    scores = _scores(np, model.n_vocab, out, stats.logprobs) if output_scores else None
    return GenerateOutput(sequences, cache.to_past_key_values(pkv_dtype) if use_cache else None, stats, scores)


_MAX_TOP_LOGPROBS = 20


def _scores(np, n_vocab, tokens, logprobs):
    """transformers' `scores` from rewind's logprobs: per token a [1, n_vocab] row, -inf where no
    value was reported."""
    rows = []
    for token, (logprob, top) in zip(tokens, logprobs):
        row = np.full((1, n_vocab), -np.inf, dtype=np.float32)
        for t, v in top:
            row[0, t] = v
        row[0, token] = logprob
        rows.append(row)
    return tuple(rows)


def stream_hf(model: "Model", input_ids, text: bool = False, max_new_tokens: "int | None" = None,
              past_key_values=None, do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0,
              top_k: int = 50, seed: int = 0, prompt_lookup_num_tokens: "int | None" = None,
              assistant_model: "Model | None" = None, num_assistant_tokens: "int | None" = None,
              reference_texts: "Sequence[str] | str | None" = None, max_length: "int | None" = None,
              attention_mask=None, stop_strings: "Sequence[str] | str | None" = None, stop_at_eog: bool = True,
              capacity: int = 0, kv_f16: bool = False, n_threads: int = 1, grammar: "str | None" = None,
              json_schema=None, regex: "str | None" = None, json_whitespace: str = "compact",
              **kwargs) -> "Stream":
    """Model.stream(): generate_hf's generation as a Stream of token ids (text=True: text pieces),
    each as it is decided; arguments as generate_hf's (grammar, json_schema or regex included).
    Breaking out of the loop stops it; then `stream.sequences` is the [1, n] array of the input
    and the tokens taken."""
    ctx, cache, ids, max_tokens, kw, _ = _hf_prepare(
        model, input_ids, past_key_values, max_new_tokens, max_length, do_sample, temperature, top_p, top_k, seed,
        prompt_lookup_num_tokens, assistant_model, num_assistant_tokens, reference_texts, attention_mask,
        stop_strings, stop_at_eog, capacity, kv_f16, n_threads, kwargs)
    st = Stream(ctx, cache, max_tokens, text=text, grammar=grammar, json_schema=json_schema, regex=regex,
                json_whitespace=json_whitespace, **kw)
    st.prompt_ids = ids
    return st


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
        self._kv_f16 = kv_f16
        self.last_gen = None  # the last gen()'s GenResult

    def append_text(self, text: str) -> None:
        """Tokenizes `text` (BOS only when the session is empty) and runs it."""
        ids = self.model.tokenize(text, add_bos=None if len(self.cache) == 0 else False)
        self.append_tokens(ids)

    def append(self, text: str) -> None:
        """A program's fixed text: tokenized on its own (BOS only when the session is empty) and
        run in one pass over the new tokens, the prefix's K/V reused (rewind_append_text)."""
        _settle(self.context, self.cache)
        data = text.encode()
        _check(_lib.rewind_append_text(self.context._h, self.cache._h, data, len(data)))

    def gen(self, regex: "str | None" = None, json_schema=None, grammar: "str | None" = None,
            stop: "Sequence[str] | str" = (), max_tokens: int = 128, temperature: float = 0.0, seed: int = 0,
            top_k: int = 0, top_p: float = 1.0, json_whitespace: str = "compact", source: "str | None" = None,
            k: int = 8, references: "Sequence[str]" = (), draft: "Model | None" = None, tree: int = 0,
            k_policy: "str | None" = None, stop_at_eog: bool = True) -> str:
        """One generation of a guidance-style program; returns the captured text (and sets
        self.last_gen, a GenResult: passes, guesses, forced guesses, stop reason, completeness).

        regex, json_schema (a dict or JSON text) or grammar (GBNF): at most one; the text is held
        to that language and the gen ends right after the token that completes a sentence that
        cannot grow, or where the model ends a complete one. stop: strings that end the gen; the
        captured text stops before the first of them, but the session keeps what the model wrote
        (the stop string too), and the next append() follows it. An end-of-generation token is
        never kept. source/k/...: speculation as rewind.generate's ("forced" guesses only the text
        the constraint forces; every source is composed with it); the text is the same without.
        Errors (two constraints, a bad regex, an unsupported schema keyword) raise before
        anything runs, the session unchanged."""
        _settle(self.context, self.cache)
        keep = []
        if isinstance(stop, str):
            stop = (stop,)
        opts = _options(max_tokens, temperature, seed, tuple(stop), stop_at_eog, keep, top_k, top_p)
        _constraint(opts, keep, grammar, json_schema, regex, json_whitespace)
        spec = _spec(source, k, False, references, draft, keep, tree, k_policy) if source is not None else None
        result = GenResult()
        _check(_lib.rewind_gen(self.context._h, self.cache._h, ctypes.byref(opts),
                               ctypes.byref(spec) if spec is not None else None, ctypes.byref(result)))
        buf = ctypes.create_string_buffer(result.text_bytes + 1)
        n = ctypes.c_size_t(0)
        _check(_lib.rewind_gen_text(self.cache._h, buf, len(buf), ctypes.byref(n)))
        self.last_gen = result
        return buf.raw[: n.value].decode("utf-8", errors="replace")

    def append_tokens(self, ids) -> None:
        """Appends ids (a list or numpy array) and runs them; on an error nothing changes."""
        _settle(self.context, self.cache)
        arr, n = _ids(ids)
        _check(_lib.rewind_append(self.context._h, self.cache._h, arr, n))

    def generate(self, max_tokens: int = 128, **kw) -> "Tuple[str, Stats]":
        """Returns (the generated text, Stats); keyword arguments as rewind.generate (on_token
        gets each token id as it is decided and may stop the generation by returning False)."""
        before = self.text()
        ids, stats = generate(self.context, self.cache, max_tokens, **kw)
        after = self.text()
        return (after[len(before):] if after.startswith(before) else self.model.detokenize(ids)), stats

    def stream(self, max_tokens: int = 128, text: bool = True, **kw) -> "Stream":
        """A Stream of the generated text, piece by piece as each token is decided (a piece may
        hold several tokens when a character spans them); text=False streams token ids instead.
        Keyword arguments as rewind.generate's, but on_token and logprobs (grammar, json_schema
        and regex included: the pieces are then that language's). Breaking out of the loop stops the
        generation after the last piece taken:

            for piece in session.stream(200, source="ngram"):
                print(piece, end="", flush=True)
                if "\n\n" in piece:
                    break
        """
        return Stream(self.context, self.cache, max_tokens, text=text, **kw)

    def next_logits(self, out: "np.ndarray | None" = None) -> "np.ndarray | list[float]":
        """The logits the next token is chosen from (rewind.next_logits, `out` as there); the
        session unchanged."""
        return next_logits(self.context, self.cache, out)

    def past_key_values(self, dtype: str = "float32") -> "Tuple[Tuple[np.ndarray, np.ndarray], ...]":
        """The session's K/V as Hugging Face's past_key_values (Cache.to_past_key_values): per
        layer (key, value) arrays [1, n_kv_heads, len(tokens) - 1, head_dim]."""
        return self.cache.to_past_key_values(dtype)

    def load_past_key_values(self, past_key_values, tokens) -> None:
        """Replaces the session's sequence by `tokens` and its K/V by a Hugging Face cache
        (Cache.from_past_key_values, whose rules and errors apply; the capacity and KV precision
        stay the session's). On any error the session is unchanged."""
        _settle(self.context, self.cache)
        self.cache = Cache.from_past_key_values(self.model, past_key_values, tokens, capacity=self.cache.capacity,
                                                kv_f16=self._kv_f16)

    def text(self) -> str:
        """The whole sequence's text."""
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
            references=(), draft=None, on_token=None, grammar=None, json_schema=None, regex=None,
            json_whitespace="compact"):
        """Adds `text` as the user's message and returns the assistant's reply (its end-of-turn
        token left out); `last_turn` then holds the ChatTurn. Generation options as
        rewind.generate's (it stops at end-of-generation tokens such as <|im_end|>); on_token gets
        each reply token id as it is decided and may stop the reply by returning False.
        grammar, json_schema or regex (at most one) holds this reply to that language, exactly
        under speculation: the end-of-turn token comes only where the reply is complete (each
        turn starts afresh). On an error (Error("capacity") when the conversation no longer fits:
        reset(); ArgumentError or FormatError for a bad constraint) the conversation is
        unchanged."""
        if not isinstance(text, str):
            raise Error("unsupported", f"Chat.say: a {type(text).__name__}; rewind formats plain text only")
        if "\0" in text:
            raise Error("argument", "Chat.say: a NUL character (the C API takes NUL-terminated text)")
        _settle(self.context)
        keep = []
        opts = _options(max_tokens, temperature, seed, stop, True, keep)
        _constraint(opts, keep, grammar, json_schema, regex, json_whitespace)
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
            temperature=0.0, seed=0, stop=(), stop_at_eog=True, grammar=None, json_schema=None, regex=None,
            json_whitespace="compact"):
        """Adds a request and returns its id. `prompt` is text (tokenized with the model's BOS
        rule) or a list of ids; source None decodes plainly, else "ngram", "ref", "draft" or
        "auto" guesses k tokens a step (other arguments as rewind.generate, the constraint
        included: each request its own). A request that does not fit the KV budget raises
        Error("capacity"), and the batch is unchanged."""
        ids = self.model.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        keep = []
        opts = _options(max_tokens, temperature, seed, stop, stop_at_eog, keep)
        _constraint(opts, keep, grammar, json_schema, regex, json_whitespace)
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
