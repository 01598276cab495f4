/* rewind's C API: lossless speculative decoding for programs in C and for other languages
 * (apps/python/rewind.py drives it through ctypes).
 *
 * Rules every function follows:
 * - Handles are opaque. Each *_new / *_load that returns REWIND_OK gives the caller a handle it
 *   releases with the matching *_free (NULL is accepted and ignored); on failure *out is NULL.
 * - Every function that can fail returns a rewind_status; on failure nothing the caller passed
 *   in has changed, and rewind_last_error() (thread-local) says what and where. No C++
 *   exception ever crosses this boundary.
 * - The caller owns every buffer it passes; rewind never keeps or frees a caller's pointer and
 *   never hands out memory the caller must free. Functions that fill a buffer take its size
 *   and report the size needed (REWIND_ERR_CAPACITY when it is too small, nothing written).
 * - A context, a cache and a chat must not be used from two threads at once; different ones may.
 *   A model is read-only and may be shared by any number of contexts and caches.
 */
#ifndef REWIND_C_H
#define REWIND_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define REWIND_C_API __attribute__((visibility("default")))
#else
#define REWIND_C_API
#endif

/* Status codes: REWIND_OK, or one per rwd::ErrorCode, or REWIND_ERR_INTERNAL (out of memory,
 * or a failure rewind did not expect). */
typedef enum rewind_status {
    REWIND_OK = 0,
    REWIND_ERR_IO = 1,          /* a file cannot be opened, read, written */
    REWIND_ERR_FORMAT = 2,      /* a malformed, truncated or corrupted file */
    REWIND_ERR_UNSUPPORTED = 3, /* architecture, tensor type, tokenizer or CPU level not handled */
    REWIND_ERR_SHAPE = 4,       /* sizes disagree */
    REWIND_ERR_CAPACITY = 5,    /* a cache, batch, context or caller buffer is too small */
    REWIND_ERR_ARGUMENT = 6,    /* a NULL handle or pointer, an out-of-range option or token id */
    REWIND_ERR_STATE = 7,       /* a cache of another model, a draft that does not match */
    REWIND_ERR_INTERNAL = 8
} rewind_status;

typedef int32_t rewind_token;
typedef struct rewind_model rewind_model;
typedef struct rewind_context rewind_context;
typedef struct rewind_cache rewind_cache;

/* "ok", "io", "format", "unsupported", "shape", "capacity", "argument", "state", "internal". */
REWIND_C_API const char* rewind_status_name(rewind_status status);
/* The message of this thread's last failed call ("" if none yet). Valid until this thread's
 * next call into rewind. */
REWIND_C_API const char* rewind_last_error(void);
/* The library's version, "MAJOR.MINOR.PATCH". */
REWIND_C_API const char* rewind_version(void);

/* ---- Models ---------------------------------------------------------------------------- */

/* Loads a llama-family GGUF file. Errors: argument (NULL), io, format, unsupported, shape. */
REWIND_C_API rewind_status rewind_model_load(const char* path, rewind_model** out);
REWIND_C_API void rewind_model_free(rewind_model* model);
/* Vocabulary size, training context length, special ids (-1 when the vocabulary has none);
 * 0 / -1 for a NULL model. */
REWIND_C_API int32_t rewind_model_n_vocab(const rewind_model* model);
REWIND_C_API int32_t rewind_model_n_ctx(const rewind_model* model);
REWIND_C_API rewind_token rewind_model_bos(const rewind_model* model);
REWIND_C_API rewind_token rewind_model_eos(const rewind_model* model);

/* Text -> ids. add_bos: -1 the model's default, 0 never, 1 always. Writes at most `capacity`
 * ids to `tokens` (which may be NULL when capacity is 0) and the count to *n_tokens; if they do
 * not fit, writes nothing but *n_tokens and returns REWIND_ERR_CAPACITY. */
REWIND_C_API rewind_status rewind_tokenize(const rewind_model* model, const char* text, size_t text_len,
                                           int add_bos, rewind_token* tokens, size_t capacity,
                                           size_t* n_tokens);
/* Ids -> text (UTF-8 bytes, NUL-terminated). *n_bytes gets the length without the NUL; if
 * buf_size < *n_bytes + 1, nothing is written but *n_bytes and REWIND_ERR_CAPACITY returned.
 * Errors: argument (NULL, an id outside the vocabulary), capacity. */
REWIND_C_API rewind_status rewind_detokenize(const rewind_model* model, const rewind_token* tokens,
                                             size_t n_tokens, char* buf, size_t buf_size, size_t* n_bytes);

/* ---- Contexts (run buffers and threads) ------------------------------------------------- */

typedef struct rewind_context_options {
    int32_t n_threads; /* >= 1 */
    int64_t max_batch; /* tokens per internal pass, >= 1 (clamped to the context length) */
    /* How the forward pass rounds: "exact" (rewind's fixed reduction orders: a token's logits do
     * not depend on its pass size or the thread count; speculation needs this) or "llamacpp"
     * (llama.cpp's CPU numerics, to compare with its outputs; logits then depend on the pass
     * size: set max_batch >= 512 to pass prompts whole as llama.cpp does). NULL: "exact". */
    const char* numerics;
    /* The highest SIMD level the CPU kernels may use: "scalar", "avx2", "avx-vnni" ("avxvnni"
     * too) or "avx512". NULL: the best this CPU has. Ignored on a CUDA device. */
    const char* simd;
    /* Where the forward pass runs: "cpu", "cuda" (= "cuda:0") or "cuda:N". NULL: "cpu". */
    const char* device;
} rewind_context_options;
/* n_threads 1, max_batch 256, numerics "exact", simd NULL (the CPU's best), device "cpu". */
REWIND_C_API rewind_context_options rewind_context_default_options(void);

/* The context keeps the model alive: the model handle may be freed before it. opts may be NULL
 * (defaults); the option strings are read during the call only. Errors: argument (n_threads or
 * max_batch < 1; an unknown numerics, simd or device name: the message lists the accepted ones),
 * unsupported (a SIMD level this CPU lacks, naming the CPU's best; a CUDA device in a build
 * without CUDA or on a machine without that GPU; CUDA with "llamacpp" numerics or a weight type
 * it lacks), capacity (device memory runs out). */
REWIND_C_API rewind_status rewind_context_new(const rewind_model* model, const rewind_context_options* opts,
                                              rewind_context** out);
REWIND_C_API void rewind_context_free(rewind_context* ctx);

/* ---- Caches: a token sequence and the KV cache of all of it but its newest token ----------
 * The newest token is held back: its logits are where the next generation starts, so no token
 * is ever run twice. */

/* capacity: positions (0: the model's context length). kv_f16: store K/V in half precision.
 * The cache keeps the model alive. Errors: argument, capacity (above the model's context). */
REWIND_C_API rewind_status rewind_cache_new(const rewind_model* model, int64_t capacity, int kv_f16,
                                            rewind_cache** out);
REWIND_C_API void rewind_cache_free(rewind_cache* cache);
/* Tokens in the sequence (0 for NULL); the KV cache holds max(0, n - 1) positions. */
REWIND_C_API int64_t rewind_cache_n_tokens(const rewind_cache* cache);
REWIND_C_API int64_t rewind_cache_capacity(const rewind_cache* cache);
/* Copies the sequence's ids, as rewind_tokenize fills its buffer. */
REWIND_C_API rewind_status rewind_cache_tokens(const rewind_cache* cache, rewind_token* tokens, size_t capacity,
                                               size_t* n_tokens);
/* Keeps the first n tokens (O(1)). Errors: argument (NULL, n < 0 or n > the token count). */
REWIND_C_API rewind_status rewind_cache_truncate(rewind_cache* cache, int64_t n);
/* Writes the KV cache (not the ids: keep them with rewind_cache_tokens) to a versioned,
 * checksummed file; a failure leaves an older file at `path` intact. Errors: argument, io. */
REWIND_C_API rewind_status rewind_cache_save(const rewind_cache* cache, const char* path);
/* Reads a file written by rewind_cache_save for `model`, with the ids of the sequence it was
 * saved with (n_tokens must be the file's positions + 1, or 0 for an empty cache). Errors:
 * argument, io, format, unsupported, capacity, state (written for another model, or ids that
 * do not match the file's length). */
REWIND_C_API rewind_status rewind_cache_load(const rewind_model* model, const char* path, int64_t capacity,
                                             int kv_f16, const rewind_token* tokens, size_t n_tokens,
                                             rewind_cache** out);

/* ---- Hugging Face past_key_values ---------------------------------------------------------
 * transformers keeps a model's cache as one (key, value) pair of tensors per layer, each
 * [batch, n_head_kv, positions, head_dim], keys after rope. The functions below take and give
 * one layer's key or value as a C-contiguous [n_head_kv, n_positions, head_dim] array (batch 1
 * left out), F32 or F16. The layouts of a key row differ for llama files: the GGUF converter
 * permutes each head's Q and K weight rows so that rope rotates adjacent pairs (llama.cpp's and
 * rewind's convention), where transformers rotates the two halves; so a Hugging Face key row maps
 * to rewind's as k_rewind[2i] = k_hf[i], k_rewind[2i+1] = k_hf[i + head_dim/2] (per KV head;
 * values are not permuted). Files whose rope rotates halves (qwen2, qwen3, phi3, gemma3) are not
 * permuted. These functions apply the mapping, so callers hand over transformers' arrays as they
 * are. */

typedef enum rewind_dtype {
    REWIND_DTYPE_F32 = 0,
    REWIND_DTYPE_F16 = 1 /* IEEE half; rewind rounds to nearest even when it writes one */
} rewind_dtype;

/* The cache shape of a model, what a past_key_values must match. */
typedef struct rewind_kv_shape {
    int64_t n_layer;
    int64_t n_head_kv;
    int64_t head_dim;
    int hf_keys_permuted;     /* 1: keys map by the permutation above (llama), 0: unchanged */
    const char* architecture; /* general.architecture; owned by the model, valid while it lives */
} rewind_kv_shape;
/* Errors: argument (NULL). */
REWIND_C_API rewind_status rewind_model_kv_shape(const rewind_model* model, rewind_kv_shape* out);

/* A new cache holding `tokens` and, for their positions, the K/V of a Hugging Face cache:
 * keys[l] and values[l] point at layer l's arrays, C-contiguous [n_head_kv][n_positions][head_dim]
 * of `dtype` (a rewind_dtype, passed as int so that any value can be checked). tokens: the ids those positions ran, then the next one (n_tokens = n_positions + 1,
 * whose logits the next generation starts from); or exactly the ids of the positions (n_tokens =
 * n_positions >= 1): the last position's K/V is then dropped and its token held back, to run again
 * with the next call, since a cache always holds its newest token back (its K/V comes out the same).
 * n_positions = n_tokens = 0 gives an empty cache. capacity and kv_f16 as rewind_cache_new (an F16
 * cache rounds the values to half). Shapes, counts and the capacity are checked before any K/V is
 * read; on failure *out is NULL and nothing else changes. Errors: argument (NULL model, out, keys/values with
 * n_layers > 0, a NULL layer pointer with n_positions > 0, tokens with n_tokens > 0; an unknown
 * dtype; n_positions < 0; a non-finite value; an id outside the vocabulary), shape (n_layers,
 * n_head_kv or head_dim other than the model's: the message gives both), state (n_tokens other
 * than n_positions or n_positions + 1), capacity (n_tokens above the capacity or the model's
 * context). */
REWIND_C_API rewind_status rewind_cache_import_hf(const rewind_model* model, int64_t capacity, int kv_f16,
                                                  int dtype, const void* const* keys,
                                                  const void* const* values, size_t n_layers, int64_t n_head_kv,
                                                  int64_t n_positions, int64_t head_dim, const rewind_token* tokens,
                                                  size_t n_tokens, rewind_cache** out);
/* Positions whose K/V the cache holds: max(0, tokens - 1) (0 for NULL). */
REWIND_C_API int64_t rewind_cache_n_positions(const rewind_cache* cache);
/* Writes the cache's K/V in Hugging Face's layout into caller arrays shaped as
 * rewind_cache_import_hf takes them, with n_positions = rewind_cache_n_positions(cache) (all of
 * them). A cache imported from F32 (F16) arrays and exported as F32 (F16) gives back the same
 * bits when the cache stores that precision or more. Nothing is written on failure. Errors:
 * argument (NULL cache, keys/values or a layer pointer; an unknown dtype), shape (n_layers,
 * n_head_kv, n_positions or head_dim other than the cache's). */
REWIND_C_API rewind_status rewind_cache_export_hf(const rewind_cache* cache, int dtype, void* const* keys,
                                                  void* const* values, size_t n_layers, int64_t n_head_kv,
                                                  int64_t n_positions, int64_t head_dim);

/* Appends ids to the sequence and runs through `ctx` the tokens this makes final (the held-back
 * one and all new ones but the last). Errors: argument (NULL, an id outside the vocabulary),
 * capacity, state (ctx and cache of different models). */
REWIND_C_API rewind_status rewind_append(rewind_context* ctx, rewind_cache* cache, const rewind_token* tokens,
                                         size_t n_tokens);

/* The logits of the next position: what the next generated token is chosen from (before any
 * sampler option: temperature, penalties and filters are not applied). Runs the held-back token
 * on top of the cache through `ctx`, points *logits at its n_vocab scores (*n_vocab gets the
 * model's vocabulary size), then rolls the KV cache back (O(1)): the cache's sequence and state
 * are as before the call. They are the same bits greedy generation's argmax is taken from with
 * this context's options. *logits belongs to the context and stays valid until the next call
 * that runs `ctx` (append, generate, next_logits) or frees it; copy it to keep it. On failure
 * *logits and *n_vocab are untouched. Errors: argument (NULL), state (an empty sequence: append
 * a prompt first; ctx and cache of different models). */
REWIND_C_API rewind_status rewind_next_logits(rewind_context* ctx, rewind_cache* cache, const float** logits,
                                              size_t* n_vocab);

/* ---- Generation ------------------------------------------------------------------------- */

/* Called with each generated token as soon as it is decided (in order, each exactly once, the
 * last one included), before the call that generates returns. Return non-zero to go on, 0 to stop:
 * the generation then ends after this token (kept, as every token so far, in the output and the
 * cache) with REWIND_STOP_CANCELLED, unless this token also ended it by another rule
 * (end-of-generation, a stop string, max_tokens, a full context), which is then the stop reason.
 * It runs on the calling thread, in the middle of the generation: it may call rewind functions
 * that do not use the generating context or cache (e.g. rewind_detokenize on the model), and
 * must not use that context or cache, free anything the call uses, throw a C++ exception or
 * longjmp out. */
typedef int (*rewind_token_callback)(rewind_token token, void* user_data);

/* Where a generation writes each generated token's log-probability, computed from the logits that
 * decided it (the same bits with or without speculation). Buffers are the caller's, with room for
 * out_capacity tokens (the out_tokens capacity of the call): entry i belongs to token i. */
typedef struct rewind_logprobs {
    int32_t top_n;            /* alternatives per token, 0..20 */
    int processed;            /* 0: the model's log-softmax; 1: after penalties, logit_bias and
                               * temperature (greedy: 1), before top-k/top-p/min-p */
    float* logprob;           /* [out_capacity]: each generated token's */
    rewind_token* top_tokens; /* [out_capacity * top_n], most likely first (NULL when top_n is 0);
                               * entries past the vocabulary's size are -1 */
    float* top_logprobs;      /* [out_capacity * top_n], theirs (-inf past the vocabulary) */
} rewind_logprobs;

typedef struct rewind_generate_options {
    int64_t max_tokens;    /* >= 0 */
    float temperature;     /* <= 0: greedy */
    int32_t top_k;         /* 0: off */
    float top_p;           /* 1: off */
    float min_p;           /* 0: off */
    float repeat_penalty;  /* 1: off */
    int32_t repeat_last_n;
    uint64_t seed;
    int stop_at_eog;       /* end on EOS / EOT */
    const char* const* stop_strings; /* generation ends after the token completing one (may be NULL) */
    size_t n_stop_strings;
    rewind_token_callback on_token; /* NULL: none. rewind_generate and rewind_generate_speculative
                                     * call it; rewind_batch_add refuses it (argument) */
    void* user_data;                /* passed to on_token, never read by rewind */
    /* Penalties beside repeat_penalty, over the same window of repeat_last_n tokens (-1: all). */
    float frequency_penalty;        /* [-2, 2], 0: off; OpenAI's: minus count * penalty */
    float presence_penalty;         /* [-2, 2], 0: off; OpenAI's: minus penalty if present */
    const rewind_token* logit_bias_tokens; /* n_logit_bias ids whose logits get a bias */
    const float* logit_bias_values;        /* their biases, each in [-100, 100] */
    size_t n_logit_bias;
    rewind_logprobs* logprobs;      /* NULL: none. rewind_generate and rewind_generate_speculative
                                     * fill it; rewind_batch_add and rewind_gen refuse it (argument) */
    /* A constraint on the generated text: at most one of the three non-NULL and non-empty (NULL or
     * "": none). Every generated token keeps the text a prefix of a sentence of the language; an
     * end-of-generation token is allowed only where the text is a complete sentence, and then
     * always ends the generation (REWIND_STOP_END_OF_GENERATION), even with stop_at_eog 0. Exact
     * under speculation, where the text the constraint forces is guessed too (stats.proposed and
     * accepted count it). Compiled once per context (a repeated text costs a lookup). Honoured by
     * rewind_generate, rewind_generate_speculative, rewind_gen, rewind_batch_add (compiled once
     * per batch) and rewind_chat_say (each reply one sentence, afresh every turn).
     * docs/structured-output.md lists what each language supports; a feature it does not is
     * refused, never ignored. */
    const char* grammar;     /* GBNF text (llama.cpp's syntax), start rule `root` */
    const char* json_schema; /* a JSON Schema as JSON text; properties in the declared order */
    const char* regex;       /* the ECMAScript subset of JSON Schema's `pattern`, matched whole */
    int json_whitespace;     /* json_schema only: 0 none at all (compact), 1 any JSON whitespace
                              * between tokens, in runs of at most 32 */
} rewind_generate_options;
/* 128 tokens, greedy, no filters or penalties, stop at EOS/EOT, no stop strings, no callback, no
 * logprobs, no constraint, compact JSON. */
REWIND_C_API rewind_generate_options rewind_generate_default_options(void);

/* Why a generation ended. */
typedef enum rewind_stop {
    REWIND_STOP_MAX_TOKENS = 0,
    REWIND_STOP_END_OF_GENERATION = 1,
    REWIND_STOP_STRING = 2,
    REWIND_STOP_CONTEXT_FULL = 3,
    REWIND_STOP_CANCELLED = 4 /* on_token returned 0, or rewind_batch_cancel ended a request */
} rewind_stop;

/* What a generation did. For plain decoding, passes == emitted and no guesses. */
typedef struct rewind_stats {
    int64_t emitted;        /* tokens generated */
    int64_t passes;         /* target forward passes after the prompt */
    int64_t proposed;       /* guesses verified */
    int64_t accepted;       /* guesses the target agreed with */
    int64_t prompt_tokens;  /* tokens run for the prompt (the held-back one and any new) */
    double prompt_seconds;
    double generate_seconds; /* everything after the prompt */
    int32_t stop;           /* a rewind_stop */
} rewind_stats;

/* Generates from the sequence in `cache` (which must not be empty); the generated ids are
 * appended to it and written to out_tokens, whose capacity must be at least max_tokens.
 * opts->on_token, when set, sees each token as it is decided and may stop the generation.
 * stats may be NULL. Errors, before anything runs: argument (NULL, bad options, capacity <
 * max_tokens; two constraints named, a grammar or regex that does not parse, a schema keyword
 * not implemented: the message names the field), format (a json_schema that is not JSON),
 * capacity, state (an empty sequence, ctx and cache of different models). */
REWIND_C_API rewind_status rewind_generate(rewind_context* ctx, rewind_cache* cache, const rewind_generate_options* opts,
                                           rewind_token* out_tokens, size_t out_capacity, size_t* n_out,
                                           rewind_stats* stats);

/* Speculative decoding: guesses from a named source, verified by the target in one pass each.
 * The output is exactly rewind_generate's with the same options, and on_token sees the same
 * tokens in the same order (several in a row after a pass that accepts guesses), so stopping
 * after the same token leaves the same output and cache. */
/* How many guesses each pass verifies (only the pass structure depends on it, never a token). */
typedef enum rewind_k_policy {
    REWIND_K_FIXED = 0,    /* k every pass */
    REWIND_K_ADAPTIVE = 1, /* grow and shrink with acceptance, at most k */
    REWIND_K_COST = 2      /* the guesses (chain or tree) whose chance to stand pays for the pass
                            * time their rows add, from the pass times measured as it runs; at
                            * most k (in a batch: as REWIND_K_FIXED) */
} rewind_k_policy;

typedef struct rewind_spec_options {
    const char* source;            /* "ngram", "ref", "draft", "auto", "auto-first", "suffix",
                                    * "forced" (only the text a constraint forces) */
    int32_t k;                     /* guesses (tree nodes) per pass, 1..255 (the ceiling unless fixed) */
    int k_policy;                  /* a rewind_k_policy value */
    const char* const* references; /* documents to copy from: ref (required), auto (optional) */
    size_t n_references;
    const rewind_model* draft;     /* a draft model with the target's vocabulary: draft
                                    * (required), auto (optional); NULL otherwise */
    int32_t branches;              /* token trees: continuations per node of the source, 1..64
                                    * (1: chains); 0: each source's own (suffix branches, the
                                    * others make chains) */
} rewind_spec_options;
/* source "ngram", k 8, REWIND_K_FIXED, no references, no draft, branches 0. */
REWIND_C_API rewind_spec_options rewind_spec_default_options(void);

/* As rewind_generate, guessing with the source `spec` names. stats counts passes and guesses.
 * Errors: as rewind_generate; argument (an unknown source, k out of range, references or a
 * draft the source would ignore, a source without what it needs), state (a draft whose
 * vocabulary differs from the target's). */
REWIND_C_API rewind_status rewind_generate_speculative(rewind_context* ctx, rewind_cache* cache,
                                                       const rewind_generate_options* opts,
                                                       const rewind_spec_options* spec, rewind_token* out_tokens,
                                                       size_t out_capacity, size_t* n_out, rewind_stats* stats);

/* ---- Guidance-style programs: appended text and constrained generations on one cache -------
 * A program appends fixed text (rewind_append_text: one pass over the new tokens, the prefix's
 * KV reused) and generates pieces of text (rewind_gen) held to a grammar, a JSON Schema, a regex
 * or stop strings, each speculating when given a source. The text is the same with or without
 * speculation, greedy or seeded. */

/* Tokenizes text_len bytes of UTF-8 `text` on their own (BOS only when the cache is empty and the
 * model adds one; control-token names stay text) and appends them as rewind_append does.
 * Errors: argument (NULL ctx, cache, or text with text_len > 0), capacity (nothing changed),
 * state (ctx and cache of different models). */
REWIND_C_API rewind_status rewind_append_text(rewind_context* ctx, rewind_cache* cache, const char* text,
                                              size_t text_len);

/* What a rewind_gen did. */
typedef struct rewind_gen_result {
    rewind_stats stats;      /* as rewind_generate_speculative's (plain decoding: passes == emitted,
                              * no guesses); stop END_OF_GENERATION also when the constraint
                              * finished (nothing else could follow) */
    int64_t forced_proposed; /* of stats.proposed: guesses that were text the constraint forces */
    int64_t forced_accepted; /* of stats.accepted: forced guesses that stood */
    int64_t n_tokens;        /* ids the call added to the cache */
    size_t text_bytes;       /* the captured text's length (rewind_gen_text reads it) */
    int complete;            /* 1: the captured text is a sentence of the constraint's language
                              * (always 1 without a constraint) */
} rewind_gen_result;

/* One gen of a program: generates from the end of `cache` (not empty) under opts (NULL:
 * defaults; its constraint, stop strings, max_tokens >= 0, sampling; no logprobs), plainly when
 * spec is NULL, else speculating as rewind_generate_speculative (source "forced" guesses only the
 * text a constraint forces; every source is composed with it under a constraint). It ends right
 * after the token that finishes the constraint's sentence (no pass for an end token), or when
 * the model ends a complete sentence, a stop string appears, max_tokens, the cache is full, or
 * on_token returns 0. The captured text (read with rewind_gen_text; kept with the cache until the
 * next rewind_gen on it) is the generated text, cut before the first stop string when one ended
 * it. The cache keeps every generated id the model saw (after a stop string: the stop string and
 * the rest of its token too, which the next appended text follows), but an end-of-generation id
 * is taken out, so appended text never follows it (the id before it then runs again with the next
 * call). result may be NULL. Errors, before anything runs (nothing changed): as
 * rewind_generate_speculative, and argument for opts->logprobs. */
REWIND_C_API rewind_status rewind_gen(rewind_context* ctx, rewind_cache* cache, const rewind_generate_options* opts,
                                      const rewind_spec_options* spec, rewind_gen_result* result);
/* The last rewind_gen's captured text on `cache` ("" before one), as rewind_detokenize fills its
 * buffer. Errors: argument (NULL cache or n_bytes), capacity. */
REWIND_C_API rewind_status rewind_gen_text(const rewind_cache* cache, char* buf, size_t buf_size, size_t* n_bytes);

/* ---- Continuous batching ----------------------------------------------------------------
 * Many requests decode together: each rewind_batch_step is one forward pass that carries the
 * next prompt chunk of every request still reading its prompt and, for the others, each one's
 * pending token and its own guesses (when it has a source); each request then keeps its own
 * accepted prefix. Requests join (rewind_batch_add) and leave (when they end, or are cancelled)
 * between steps. A request's tokens equal its own rewind_generate output on a cache holding its
 * prompt, with the same options, whoever else is in the batch (a token's logits do not depend on
 * the pass, the batch or the thread count).
 *
 * A request is RUNNING from rewind_batch_add until the step in which it ends; it is then DONE
 * (a stop rule ended it), FAILED (its own error ended it: the others and the step go on) or
 * CANCELLED, and stays queryable, its tokens kept, until rewind_batch_take or
 * rewind_batch_release forgets it. Request ids count up from 1 and are never reused in a batch.
 * A batch, like a context, must not be used from two threads at once. */

typedef struct rewind_batch rewind_batch;

typedef struct rewind_batch_options {
    /* Bytes of KV cache all running requests may hold together (0: no limit). A request's cache,
     * min(model context, prompt + max_tokens) positions, is allocated when it is added and freed
     * when it ends; rewind_batch_add refuses (capacity) a request that does not fit. */
    uint64_t kv_budget_bytes;
    int kv_f16;               /* store K/V in half precision */
    int64_t prefill_chunk;    /* prompt tokens per step over all requests reading one, >= 1 */
    int64_t pass_tokens;      /* pending tokens + guesses per step, >= 0 (0: the context's
                               * max_batch); guesses beyond it are dropped, least likely first */
    int share_prefixes;       /* copy a prompt prefix a running request already holds */
    int cost_model;           /* keep a guess only while it pays for its row in the pass */
    double pass_fixed_seconds; /* the cost model's pass time a + b * rows when both are > 0 */
    double pass_row_seconds;   /* (finite, >= 0); otherwise fitted from the batch's own passes */
} rewind_batch_options;
/* No KV budget, F32 K/V, prefill chunk 64, pass_tokens 0, prefixes shared, no cost model. */
REWIND_C_API rewind_batch_options rewind_batch_default_options(void);

/* A batch over `model` with its own context (ctx_opts; NULL: defaults). The batch owns that
 * context because every step uses it for the batch's whole life; its max_batch bounds the rows of
 * one pass and so the number of running requests. opts may be NULL (defaults). The batch keeps
 * the model alive. Errors: argument (NULL model or out, options out of range), and as
 * rewind_context_new for ctx_opts (argument, unsupported, capacity). */
REWIND_C_API rewind_status rewind_batch_new(const rewind_model* model, const rewind_context_options* ctx_opts,
                                            const rewind_batch_options* opts, rewind_batch** out);
/* Frees the batch and every request in it (running ones are dropped). */
REWIND_C_API void rewind_batch_free(rewind_batch* batch);

/* Adds a request: the prompt (n_prompt >= 1 ids, BOS included if the model wants one),
 * generation options as rewind_generate's (max_tokens >= 0; past the context the request ends
 * with REWIND_STOP_CONTEXT_FULL, as rewind_generate does on a cache of the whole context), and
 * spec: NULL for plain decoding, or a source and k as rewind_generate_speculative takes (a draft
 * source runs its own draft cache, outside the KV budget). Its prompt runs in the next steps.
 * Writes its id to *request_id. On failure nothing is added and no other request changes.
 * Errors: argument (NULL batch, prompt, opts or request_id; an empty prompt; an id outside the
 * vocabulary; bad sampler options; an on_token callback; an unknown source, k outside 1..255,
 * references or a draft the source would ignore or lacks), capacity (a prompt longer than the model's context; the
 * KV budget would be exceeded; as many requests running as the context's max_batch; a draft
 * whose context is shorter than the request's cache), state (a
 * draft whose vocabulary differs; a batch broken by an earlier internal failure). */
REWIND_C_API rewind_status rewind_batch_add(rewind_batch* batch, const rewind_token* prompt, size_t n_prompt,
                                            const rewind_generate_options* opts, const rewind_spec_options* spec,
                                            uint64_t* request_id);

/* One step (one forward pass) over every running request; requests that end in it become DONE,
 * FAILED or CANCELLED. *n_active gets the number still running (0: nothing left to do; a step
 * with no request is not an error). A request that fails (its source throws, its pass is refused)
 * ends FAILED with its own status and message; the step still returns REWIND_OK.
 * Errors: argument (NULL batch or n_active; nothing runs), state (a batch broken by an earlier
 * internal failure), internal (out of memory in the middle of a pass: request states are then
 * undefined, so the batch is marked broken and every later add or step refuses with state). */
REWIND_C_API rewind_status rewind_batch_step(rewind_batch* batch, int64_t* n_active);

/* Asks running request `id` to end: at the next step it ends CANCELLED (stop
 * REWIND_STOP_CANCELLED) without running again, its tokens so far kept; until then it stays
 * RUNNING. Errors: argument (NULL batch, an id the batch does not hold), state (the request has
 * already ended). */
REWIND_C_API rewind_status rewind_batch_cancel(rewind_batch* batch, uint64_t request_id);

/* Requests running (0 for NULL), and the KV bytes their caches hold. */
REWIND_C_API int64_t rewind_batch_n_active(const rewind_batch* batch);
REWIND_C_API uint64_t rewind_batch_kv_bytes(const rewind_batch* batch);

typedef enum rewind_request_state {
    REWIND_REQUEST_RUNNING = 0,
    REWIND_REQUEST_DONE = 1,
    REWIND_REQUEST_FAILED = 2,
    REWIND_REQUEST_CANCELLED = 3
} rewind_request_state;

typedef struct rewind_request_info {
    int32_t state;                /* a rewind_request_state */
    int32_t status;               /* REWIND_OK, or the rewind_status of a FAILED request's error */
    int64_t n_tokens;             /* tokens generated so far (prompt excluded) */
    int64_t prompt_tokens_shared; /* prompt positions copied from another request's cache */
    double first_token_seconds;   /* from rewind_batch_add to its first token (0: none yet) */
    double latency_seconds;       /* from rewind_batch_add to its end (0: running) */
    /* emitted, passes (steps that judged its tokens), proposed, accepted, prompt_tokens (run for
     * it, shared ones excluded), prompt_seconds (add to prompt read), generate_seconds (the wall
     * time of the steps it decoded in), stop (a rewind_stop: meaningful once DONE or CANCELLED). */
    rewind_stats stats;
} rewind_request_info;

/* The state of request `id`, running or ended. Errors: argument (NULL batch or out, an id the
 * batch does not hold). */
REWIND_C_API rewind_status rewind_batch_request_info(const rewind_batch* batch, uint64_t request_id,
                                                     rewind_request_info* out);
/* Its tokens generated so far (all of them once ended), as rewind_tokenize fills its buffer.
 * Errors: argument (as request_info; NULL n_tokens), capacity. */
REWIND_C_API rewind_status rewind_batch_request_tokens(const rewind_batch* batch, uint64_t request_id,
                                                       rewind_token* tokens, size_t capacity, size_t* n_tokens);
/* A FAILED request's message ("" for any other), as rewind_detokenize fills its buffer.
 * Errors: argument (as request_info; NULL n_bytes), capacity. */
REWIND_C_API rewind_status rewind_batch_request_error(const rewind_batch* batch, uint64_t request_id, char* buf,
                                                      size_t buf_size, size_t* n_bytes);
/* The ids of the requests that have ended and are not yet taken or released, in the order they
 * were added, as rewind_tokenize fills its buffer. Errors: argument (NULL batch or n_ids),
 * capacity. */
REWIND_C_API rewind_status rewind_batch_finished(const rewind_batch* batch, uint64_t* ids, size_t capacity,
                                                 size_t* n_ids);
/* Takes an ended request out of the batch: its tokens (as rewind_batch_request_tokens) and its
 * info (info may be NULL), then forgets it. On failure nothing is forgotten. Errors: argument
 * (as request_tokens), state (the request is still running), capacity (the tokens do not fit:
 * *n_tokens says how many). */
REWIND_C_API rewind_status rewind_batch_take(rewind_batch* batch, uint64_t request_id, rewind_token* tokens,
                                             size_t capacity, size_t* n_tokens, rewind_request_info* info);
/* Forgets an ended request without copying anything. Errors: argument (NULL batch, an id the
 * batch does not hold), state (still running: cancel it first). */
REWIND_C_API rewind_status rewind_batch_release(rewind_batch* batch, uint64_t request_id);

/* ---- Chat: conversations formatted by a model's chat template ---------------------------
 * rewind writes the templates of the Llama 3, ChatML/Qwen, Phi-3 and Gemma families itself,
 * byte for byte; a message's text never becomes a control token ("<|im_end|>" typed in a
 * message stays those characters). */

typedef struct rewind_chat_message {
    const char* role;    /* "system", "user" or "assistant" */
    const char* content; /* UTF-8 text, NUL-terminated */
} rewind_chat_message;

typedef struct rewind_chat_options {
    /* NULL or "": the model file's tokenizer.chat_template. Else a built-in format name
     * ("chatml", "qwen2", "qwen2.5", "qwen3", "llama3", "llama3.1", "llama3-simple", "phi3",
     * "gemma", ...) or a template's text, whose family is detected. */
    const char* chat_template;
    int add_generation_prompt; /* end with the assistant's header, ready for its reply */
    const char* bos_token;     /* the texts the template writes for BOS and EOS; NULL or "": */
    const char* eos_token;     /* the tokenizer's own */
    int enable_thinking;       /* Qwen3 only: 0 adds an empty think block after the prompt */
    const char* date_string;   /* Llama 3.1+: its "Today Date"; NULL or "": "26 Jul 2024" */
} rewind_chat_options;
/* The file's template, a generation prompt, the tokenizer's BOS/EOS texts, thinking on, no date. */
REWIND_C_API rewind_chat_options rewind_chat_default_options(void);

/* The conversation as the template renders it (UTF-8, NUL-terminated), as rewind_detokenize fills
 * its buffer: *n_bytes gets the length without the NUL; if buf_size < *n_bytes + 1, nothing is
 * written but *n_bytes and REWIND_ERR_CAPACITY returned. opts may be NULL (defaults).
 * Errors: argument (NULL model, n_bytes, messages with n_messages > 0, a NULL role or content; an
 * empty conversation, an unknown role, roles that do not alternate where the template requires
 * it; an unknown format name), unsupported (no chat_template and a file without one; a template
 * rewind does not recognise; a role it does not format yet, "tool"), capacity. */
REWIND_C_API rewind_status rewind_chat_format(const rewind_model* model, const rewind_chat_options* opts,
                                              const rewind_chat_message* messages, size_t n_messages, char* buf,
                                              size_t buf_size, size_t* n_bytes);
/* The same conversation as ids, markers as control tokens and message text as text, exactly one
 * BOS first when the template or the tokenizer wants one, as rewind_tokenize fills its buffer.
 * Errors: as rewind_chat_format; unsupported also when the template writes a BOS the vocabulary
 * lacks. */
REWIND_C_API rewind_status rewind_chat_tokenize(const rewind_model* model, const rewind_chat_options* opts,
                                                const rewind_chat_message* messages, size_t n_messages,
                                                rewind_token* tokens, size_t capacity, size_t* n_tokens);

/* A chat session: the conversation's messages and a KV cache that holds it. Each turn formats
 * the whole conversation, keeps the longest prefix of its ids the cache holds (earlier turns), and
 * runs only the rest; the reply equals generating from the formatted conversation from scratch. */
typedef struct rewind_chat rewind_chat;

/* What the last turn did. */
typedef struct rewind_chat_turn {
    int64_t prompt_tokens;  /* ids of the whole formatted conversation, generation prompt included */
    int64_t reused_tokens;  /* of them, held by the cache already: not run again */
    int64_t run_tokens;     /* of them, run for this turn */
    double prefill_seconds; /* running them, up to the reply's first token */
    rewind_stats stats;     /* the reply's generation (emitted includes the end-of-turn token) */
} rewind_chat_turn;

/* opts: the format and texts as for rewind_chat_format (NULL: defaults; add_generation_prompt is
 * ignored: every turn ends with one); the strings are read during the call only. system: a first
 * system message (NULL or "": none). capacity: the cache's positions (0: the model's context
 * length); kv_f16: half-precision K/V. The chat keeps the model alive. The format is resolved
 * here. Errors: argument (NULL model or out; an unknown format name), unsupported (as
 * rewind_chat_format), capacity (above the model's context). */
REWIND_C_API rewind_status rewind_chat_new(const rewind_model* model, const rewind_chat_options* opts,
                                           const char* system, int64_t capacity, int kv_f16, rewind_chat** out);
REWIND_C_API void rewind_chat_free(rewind_chat* chat);

/* Adds `user` as the next user message and generates the assistant's reply on `ctx` (plain
 * decoding when spec is NULL; else speculation as rewind_generate_speculative, with the same
 * reply). opts as rewind_generate's (max_tokens >= 0 and no output buffer to bound it; NULL:
 * defaults; opts->logprobs is refused); opts->on_token streams the reply's ids as they are decided and may stop it. The
 * reply (its end-of-turn token left out) becomes an assistant message; read it with
 * rewind_chat_reply. turn may be NULL.
 * A grammar, json_schema or regex in opts holds this reply (the assistant's text only, not the
 * template's markers) to that language, exactly as rewind_generate does: the end-of-turn token
 * is allowed only where the reply is a complete sentence, and the reply is the same with or
 * without spec. Each turn starts the constraint afresh. It is compiled before the turn is added,
 * so a bad one fails with the conversation untouched.
 * On failure the messages and last reply are unchanged (the cache may hold part of the new turn,
 * which the next turn reuses). Errors: argument (NULL ctx, chat or user; bad options; a
 * constraint as rewind_generate refuses it; as rewind_generate_speculative for spec), format (a
 * json_schema that is not JSON), state (ctx of another model), capacity (the conversation no
 * longer fits the cache: reset it; nothing runs), unsupported. */
REWIND_C_API rewind_status rewind_chat_say(rewind_context* ctx, rewind_chat* chat, const char* user,
                                           const rewind_generate_options* opts, const rewind_spec_options* spec,
                                           rewind_chat_turn* turn);
/* The last reply's text ("" before the first turn), as rewind_detokenize fills its buffer.
 * Errors: argument (NULL chat or n_bytes), capacity. */
REWIND_C_API rewind_status rewind_chat_reply(const rewind_chat* chat, char* buf, size_t buf_size, size_t* n_bytes);
/* Messages so far, the system message included (0 for NULL). */
REWIND_C_API size_t rewind_chat_n_messages(const rewind_chat* chat);
/* Forgets the conversation (messages, cache, last reply); the system message stays.
 * Errors: argument (NULL). */
REWIND_C_API rewind_status rewind_chat_reset(rewind_chat* chat);

#ifdef __cplusplus
}
#endif

#endif /* REWIND_C_H */
