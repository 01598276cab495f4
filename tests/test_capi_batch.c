/* The C API's continuous batching, compiled as C: requests of different prompts, lengths,
 * sources and samplers decoding together give each one exactly its own rewind_generate output
 * (memcmp); a request joining mid-way shares a running request's prompt prefix; admission is
 * refused on a full KV budget with the batch unchanged; a cancelled request ends, the others go
 * on; bad requests and NULLs get their own errors. Exits non-zero naming the first failed check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "rewind_c.h"

/* A failing call: its status, and a message saying something. */
#define FAILS(call, want)                                       \
    do {                                                        \
        CHECK((call) == (want));                                \
        CHECK(rewind_last_error()[0] != '\0');                  \
    } while (0)

enum { kMaxOut = 600, kRequests = 5 };

static rewind_model* g_model;
static rewind_context* g_ctx;

typedef struct Request {
    const char* prompt;
    int64_t max_tokens;
    const char* source; /* NULL: plain */
    int32_t k;
    int adaptive;
    float temperature;
    int stop_at_eog;
    rewind_token ids[kMaxOut];
    size_t n_ids;
    rewind_token expect[kMaxOut]; /* its own plain rewind_generate output */
    size_t n_expect;
    uint64_t id;
} Request;

static void tokenize(Request* r) {
    OK(rewind_tokenize(g_model, r->prompt, strlen(r->prompt), -1, r->ids, kMaxOut, &r->n_ids));
}

static rewind_generate_options options_of(const Request* r) {
    rewind_generate_options go = rewind_generate_default_options();
    go.max_tokens = r->max_tokens;
    go.temperature = r->temperature;
    go.seed = 1234;
    go.stop_at_eog = r->stop_at_eog;
    return go;
}

/* The request's own output: plain decoding on a cache of the whole context holding its prompt. */
static void plain_reference(Request* r) {
    rewind_cache* c = NULL;
    OK(rewind_cache_new(g_model, 0, 0, &c));
    OK(rewind_append(g_ctx, c, r->ids, r->n_ids));
    rewind_generate_options go = options_of(r);
    if (go.max_tokens > kMaxOut) go.max_tokens = kMaxOut; /* the context ends it first */
    OK(rewind_generate(g_ctx, c, &go, r->expect, kMaxOut, &r->n_expect, NULL));
    rewind_cache_free(c);
}

static void add(rewind_batch* b, Request* r) {
    rewind_generate_options go = options_of(r);
    rewind_spec_options so = rewind_spec_default_options();
    so.source = r->source;
    so.k = r->k;
    so.k_policy = r->adaptive ? REWIND_K_ADAPTIVE : REWIND_K_FIXED;
    OK(rewind_batch_add(b, r->ids, r->n_ids, &go, r->source ? &so : NULL, &r->id));
}

/* Takes request r out of the batch and checks it ended DONE with exactly its own output. */
static void take_and_compare(rewind_batch* b, Request* r, int32_t want_stop) {
    rewind_token out[kMaxOut];
    size_t n = 0;
    rewind_request_info info;
    OK(rewind_batch_take(b, r->id, out, kMaxOut, &n, &info));
    CHECK(info.state == REWIND_REQUEST_DONE && info.status == REWIND_OK);
    CHECK(info.stats.stop == want_stop);
    CHECK(n == r->n_expect && (size_t)info.n_tokens == n && info.stats.emitted == (int64_t)n);
    CHECK(memcmp(out, r->expect, n * sizeof *out) == 0);
    CHECK(info.stats.passes >= 1 && info.stats.passes <= info.stats.emitted);
    CHECK(info.stats.accepted <= info.stats.proposed);
    CHECK(r->source || info.stats.proposed == 0);
    CHECK(info.latency_seconds > 0 && info.first_token_seconds <= info.latency_seconds);
    printf("request %llu (%s): %zu tokens in %lld passes, %lld/%lld guesses accepted, %lld prompt tokens "
           "shared\n",
           (unsigned long long)r->id, r->source ? r->source : "plain", n, (long long)info.stats.passes,
           (long long)info.stats.accepted, (long long)info.stats.proposed, (long long)info.prompt_tokens_shared);
    /* Taken: the batch no longer holds it. */
    FAILS(rewind_batch_request_info(b, r->id, &info), REWIND_ERR_ARGUMENT);
}

/* How its own plain output ended. */
static int32_t want_stop(const Request* r) {
    return r->n_expect == (size_t)r->max_tokens ? REWIND_STOP_MAX_TOKENS : REWIND_STOP_END_OF_GENERATION;
}

static int64_t step(rewind_batch* b) {
    int64_t n_active = -1;
    OK(rewind_batch_step(b, &n_active));
    CHECK(n_active >= 0 && n_active == rewind_batch_n_active(b));
    return n_active;
}

/* Requests of different prompts, lengths, sources and samplers, one joining mid-way with a
 * prompt that starts like a running one's: each gets its own output. */
static void test_mixed_requests_equal_their_own_output(Request* rs) {
    rewind_batch_options bo = rewind_batch_default_options();
    bo.prefill_chunk = 16; /* prompts take several steps, mixed with decoding */
    rewind_context_options co = rewind_context_default_options();
    co.n_threads = 2;
    rewind_batch* b = NULL;
    OK(rewind_batch_new(g_model, &co, &bo, &b));
    for (int i = 0; i < kRequests - 1; ++i) add(b, &rs[i]);
    CHECK(rewind_batch_n_active(b) == kRequests - 1);
    CHECK(rewind_batch_kv_bytes(b) > 0);

    /* Before any step: running, nothing generated. */
    rewind_request_info info;
    OK(rewind_batch_request_info(b, rs[0].id, &info));
    CHECK(info.state == REWIND_REQUEST_RUNNING && info.n_tokens == 0 && info.latency_seconds == 0);

    int steps = 0;
    int joined = 0;
    for (;;) {
        const int64_t n_active = step(b);
        ++steps;
        if (steps == 6) {
            /* Running request 0 has read its prompt: the newcomer copies the shared prefix. */
            add(b, &rs[kRequests - 1]);
            joined = 1;
            /* Progress of a running request: a prefix of its own output. */
            rewind_token so_far[kMaxOut];
            size_t n = 0;
            OK(rewind_batch_request_tokens(b, rs[0].id, so_far, kMaxOut, &n));
            OK(rewind_batch_request_info(b, rs[0].id, &info));
            CHECK(info.state == REWIND_REQUEST_RUNNING && (size_t)info.n_tokens == n && n <= rs[0].n_expect);
            CHECK(memcmp(so_far, rs[0].expect, n * sizeof *so_far) == 0);
            continue;
        }
        if (n_active == 0 && joined) break;
        CHECK(steps < 2000);
    }
    OK(rewind_batch_request_info(b, rs[kRequests - 1].id, &info));
    CHECK(info.prompt_tokens_shared > 0);
    CHECK(info.stats.prompt_tokens == (int64_t)rs[kRequests - 1].n_ids - info.prompt_tokens_shared);

    uint64_t ids[kRequests];
    size_t n_ids = 0;
    FAILS(rewind_batch_finished(b, ids, 1, &n_ids), REWIND_ERR_CAPACITY);
    CHECK(n_ids == kRequests);
    OK(rewind_batch_finished(b, ids, kRequests, &n_ids));
    CHECK(n_ids == kRequests);
    for (int i = 0; i < kRequests; ++i) CHECK(ids[i] == rs[i].id); /* the order they were added */
    for (int i = 0; i < kRequests; ++i) take_and_compare(b, &rs[i], want_stop(&rs[i]));
    OK(rewind_batch_finished(b, ids, kRequests, &n_ids));
    CHECK(n_ids == 0);
    CHECK(rewind_batch_kv_bytes(b) == 0);
    printf("mixed: %d requests in %d steps\n", kRequests, steps);
    rewind_batch_free(b);
}

/* A KV budget that holds one request: the second is refused with the batch unchanged, and
 * admitted once the first has ended. A budget of one byte holds none. */
static void test_kv_budget(Request* r0, Request* r1) {
    rewind_batch* probe = NULL;
    OK(rewind_batch_new(g_model, NULL, NULL, &probe));
    add(probe, r0);
    const uint64_t one = rewind_batch_kv_bytes(probe);
    rewind_batch_free(probe);

    rewind_batch_options bo = rewind_batch_default_options();
    bo.kv_budget_bytes = one + one / 4; /* r1 is no smaller than r0 */
    rewind_batch* b = NULL;
    OK(rewind_batch_new(g_model, NULL, &bo, &b));
    add(b, r0);
    rewind_generate_options go = options_of(r1);
    uint64_t id = 777;
    FAILS(rewind_batch_add(b, r1->ids, r1->n_ids, &go, NULL, &id), REWIND_ERR_CAPACITY);
    CHECK(strstr(rewind_last_error(), "budget") != NULL);
    CHECK(id == 777 && rewind_batch_n_active(b) == 1 && rewind_batch_kv_bytes(b) == one);
    while (step(b) > 0) {
    }
    take_and_compare(b, r0, REWIND_STOP_MAX_TOKENS);
    add(b, r1); /* room again */
    while (step(b) > 0) {
    }
    take_and_compare(b, r1, REWIND_STOP_MAX_TOKENS);
    rewind_batch_free(b);

    bo.kv_budget_bytes = 1;
    OK(rewind_batch_new(g_model, NULL, &bo, &b));
    FAILS(rewind_batch_add(b, r0->ids, r0->n_ids, &go, NULL, &id), REWIND_ERR_CAPACITY);
    CHECK(rewind_batch_n_active(b) == 0 && rewind_batch_kv_bytes(b) == 0);
    rewind_batch_free(b);
}

/* Cancelling one request mid-way: it ends with its tokens so far (a prefix of its own output),
 * the others go on to their own outputs. */
static void test_cancel(Request* rs) {
    rewind_batch* b = NULL;
    OK(rewind_batch_new(g_model, NULL, NULL, &b));
    for (int i = 0; i < 3; ++i) add(b, &rs[i]);
    for (int i = 0; i < 8; ++i) step(b);
    Request* victim = &rs[0]; /* plain: one token a step, far from its end */
    OK(rewind_batch_cancel(b, victim->id));
    OK(rewind_batch_cancel(b, victim->id)); /* asking twice is harmless */
    rewind_request_info info;
    OK(rewind_batch_request_info(b, victim->id, &info));
    CHECK(info.state == REWIND_REQUEST_RUNNING); /* until the next step */
    const int64_t before = info.n_tokens;
    CHECK(before > 0 && before < victim->max_tokens);
    CHECK(step(b) <= 2);
    OK(rewind_batch_request_info(b, victim->id, &info));
    CHECK(info.state == REWIND_REQUEST_CANCELLED && info.stats.stop == REWIND_STOP_CANCELLED);
    CHECK(info.n_tokens == before && info.status == REWIND_OK);
    FAILS(rewind_batch_cancel(b, victim->id), REWIND_ERR_STATE);
    rewind_token out[kMaxOut];
    size_t n = 0;
    OK(rewind_batch_request_tokens(b, victim->id, out, kMaxOut, &n));
    CHECK((int64_t)n == before && memcmp(out, victim->expect, n * sizeof *out) == 0);
    OK(rewind_batch_release(b, victim->id));
    FAILS(rewind_batch_release(b, victim->id), REWIND_ERR_ARGUMENT);
    while (step(b) > 0) {
    }
    take_and_compare(b, &rs[1], want_stop(&rs[1]));
    take_and_compare(b, &rs[2], want_stop(&rs[2]));
    rewind_batch_free(b);
}

/* Half-precision K/V: each request equals plain decoding on a half-precision cache. A context of
 * max_batch 2 carries at most two requests: a third is refused (capacity), the batch unchanged. */
static void test_kv_f16_and_max_batch(Request* rs) {
    rewind_batch_options bo = rewind_batch_default_options();
    bo.kv_f16 = 1;
    rewind_context_options co = rewind_context_default_options();
    co.max_batch = 2;
    rewind_batch* b = NULL;
    OK(rewind_batch_new(g_model, &co, &bo, &b));
    Request r[2] = {rs[0], rs[1]};
    for (int i = 0; i < 2; ++i) {
        rewind_cache* c = NULL;
        OK(rewind_cache_new(g_model, 0, 1, &c));
        OK(rewind_append(g_ctx, c, r[i].ids, r[i].n_ids));
        rewind_generate_options go = options_of(&r[i]);
        OK(rewind_generate(g_ctx, c, &go, r[i].expect, kMaxOut, &r[i].n_expect, NULL));
        rewind_cache_free(c);
        add(b, &r[i]);
    }
    rewind_generate_options go = options_of(&rs[2]);
    uint64_t id = 777;
    FAILS(rewind_batch_add(b, rs[2].ids, rs[2].n_ids, &go, NULL, &id), REWIND_ERR_CAPACITY);
    CHECK(id == 777 && rewind_batch_n_active(b) == 2);
    while (step(b) > 0) {
    }
    for (int i = 0; i < 2; ++i) take_and_compare(b, &r[i], want_stop(&r[i]));
    rewind_batch_free(b);
}

/* Bad requests get their own error, the batch unchanged; a request whose max_tokens runs past
 * the context ends CONTEXT_FULL exactly where plain decoding does. */
static int refuse_token(rewind_token token, void* user_data) {
    (void)token;
    (void)user_data;
    return 0;
}

static void test_bad_requests(Request* ok, Request* long_prompt) {
    rewind_batch* b = NULL;
    OK(rewind_batch_new(g_model, NULL, NULL, &b));
    add(b, ok);
    step(b);
    const uint64_t kv = rewind_batch_kv_bytes(b);
    rewind_generate_options go = options_of(ok);
    rewind_spec_options so = rewind_spec_default_options();
    uint64_t id = 777;
    rewind_token bad[3] = {1, rewind_model_n_vocab(g_model), 5};
    FAILS(rewind_batch_add(b, bad, 3, &go, NULL, &id), REWIND_ERR_ARGUMENT);
    CHECK(strstr(rewind_last_error(), "vocabulary") != NULL);
    bad[1] = -1;
    FAILS(rewind_batch_add(b, bad, 3, &go, &so, &id), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_add(b, ok->ids, 0, &go, NULL, &id), REWIND_ERR_ARGUMENT); /* empty prompt */
    go.max_tokens = -1;
    FAILS(rewind_batch_add(b, ok->ids, ok->n_ids, &go, NULL, &id), REWIND_ERR_ARGUMENT);
    go = options_of(ok);
    go.top_p = 2.0f;
    FAILS(rewind_batch_add(b, ok->ids, ok->n_ids, &go, NULL, &id), REWIND_ERR_ARGUMENT);
    go = options_of(ok);
    go.on_token = refuse_token; /* a batch calls no callback */
    FAILS(rewind_batch_add(b, ok->ids, ok->n_ids, &go, NULL, &id), REWIND_ERR_ARGUMENT);
    CHECK(strstr(rewind_last_error(), "on_token") != NULL);
    go = options_of(ok);
    so.k = 0;
    FAILS(rewind_batch_add(b, ok->ids, ok->n_ids, &go, &so, &id), REWIND_ERR_ARGUMENT);
    so.k = 4;
    so.source = "telepathy";
    FAILS(rewind_batch_add(b, ok->ids, ok->n_ids, &go, &so, &id), REWIND_ERR_ARGUMENT);
    so.source = "ref"; /* without references */
    FAILS(rewind_batch_add(b, ok->ids, ok->n_ids, &go, &so, &id), REWIND_ERR_ARGUMENT);
    so.source = NULL;
    FAILS(rewind_batch_add(b, ok->ids, ok->n_ids, &go, &so, &id), REWIND_ERR_ARGUMENT);
    /* A prompt longer than the context. */
    const size_t n_ctx = (size_t)rewind_model_n_ctx(g_model);
    rewind_token* huge = calloc(n_ctx + 1, sizeof *huge);
    CHECK(huge != NULL);
    FAILS(rewind_batch_add(b, huge, n_ctx + 1, &go, NULL, &id), REWIND_ERR_CAPACITY);
    free(huge);
    CHECK(id == 777 && rewind_batch_n_active(b) == 1 && rewind_batch_kv_bytes(b) == kv);

    /* max_tokens far past the context (INT64_MAX): ends CONTEXT_FULL, as plain decoding does. */
    add(b, long_prompt);
    while (step(b) > 0) {
    }
    take_and_compare(b, ok, REWIND_STOP_MAX_TOKENS);
    take_and_compare(b, long_prompt, REWIND_STOP_CONTEXT_FULL);
    CHECK(long_prompt->n_ids + long_prompt->n_expect == n_ctx);
    rewind_batch_free(b);
}

/* NULL handles and pointers, unknown ids, buffers too small, running requests taken. */
static void test_argument_errors(Request* r) {
    rewind_batch* b = (rewind_batch*)r; /* cleared on failure */
    rewind_batch_options bo = rewind_batch_default_options();
    FAILS(rewind_batch_new(NULL, NULL, NULL, &b), REWIND_ERR_ARGUMENT);
    CHECK(b == NULL);
    FAILS(rewind_batch_new(g_model, NULL, NULL, NULL), REWIND_ERR_ARGUMENT);
    bo.prefill_chunk = 0;
    FAILS(rewind_batch_new(g_model, NULL, &bo, &b), REWIND_ERR_ARGUMENT);
    bo = rewind_batch_default_options();
    bo.pass_tokens = -1;
    FAILS(rewind_batch_new(g_model, NULL, &bo, &b), REWIND_ERR_ARGUMENT);
    rewind_context_options co = rewind_context_default_options();
    co.n_threads = 0;
    FAILS(rewind_batch_new(g_model, &co, NULL, &b), REWIND_ERR_ARGUMENT);
    CHECK(b == NULL);
    OK(rewind_batch_new(g_model, NULL, NULL, &b));

    rewind_generate_options go = options_of(r);
    uint64_t id = 0;
    FAILS(rewind_batch_add(NULL, r->ids, r->n_ids, &go, NULL, &id), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_add(b, NULL, r->n_ids, &go, NULL, &id), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_add(b, r->ids, r->n_ids, NULL, NULL, &id), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_add(b, r->ids, r->n_ids, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    CHECK(rewind_batch_n_active(b) == 0);
    int64_t n_active = 0;
    FAILS(rewind_batch_step(NULL, &n_active), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_step(b, NULL), REWIND_ERR_ARGUMENT);
    OK(rewind_batch_step(b, &n_active)); /* nothing to do is no error */
    CHECK(n_active == 0);

    add(b, r);
    step(b);
    rewind_request_info info;
    rewind_token out[kMaxOut];
    size_t n = 0;
    char msg[8];
    FAILS(rewind_batch_cancel(NULL, r->id), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_cancel(b, r->id + 100), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_request_info(NULL, r->id, &info), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_request_info(b, r->id, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_request_info(b, 0, &info), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_request_tokens(NULL, r->id, out, kMaxOut, &n), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_request_tokens(b, r->id, out, kMaxOut, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_request_error(b, r->id, msg, sizeof msg, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_request_error(NULL, r->id, msg, sizeof msg, &n), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_finished(NULL, NULL, 0, &n), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_finished(b, NULL, 0, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_take(NULL, r->id, out, kMaxOut, &n, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_take(b, r->id, out, kMaxOut, NULL, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_take(b, r->id, out, kMaxOut, &n, NULL), REWIND_ERR_STATE); /* running */
    FAILS(rewind_batch_release(NULL, r->id), REWIND_ERR_ARGUMENT);
    FAILS(rewind_batch_release(b, r->id), REWIND_ERR_STATE);
    CHECK(rewind_batch_n_active(NULL) == 0 && rewind_batch_kv_bytes(NULL) == 0);

    while (step(b) > 0) {
    }
    /* Buffers too small: the size needed, nothing taken. */
    FAILS(rewind_batch_request_tokens(b, r->id, NULL, 0, &n), REWIND_ERR_CAPACITY);
    CHECK(n == r->n_expect);
    FAILS(rewind_batch_take(b, r->id, out, 1, &n, &info), REWIND_ERR_CAPACITY);
    CHECK(n == r->n_expect);
    OK(rewind_batch_request_error(b, r->id, msg, sizeof msg, &n)); /* not failed: "" */
    CHECK(n == 0 && msg[0] == '\0');
    FAILS(rewind_batch_request_error(b, r->id, NULL, 0, &n), REWIND_ERR_CAPACITY);
    take_and_compare(b, r, REWIND_STOP_MAX_TOKENS);
    rewind_batch_free(b);
    rewind_batch_free(NULL);
}

int main(void) {
    OK(rewind_model_load(REWIND_SHARED_DIR "/models/pycode-4m.gguf", &g_model));
    rewind_context_options co = rewind_context_default_options();
    OK(rewind_context_new(g_model, &co, &g_ctx));

    static Request rs[kRequests] = {
        {.prompt = "import os\nimport sys\n\ndef main(argv):\n", .max_tokens = 40, .stop_at_eog = 0},
        {.prompt = "class Parser:\n    def __init__(self, text):\n        self.text = text\n",
         .max_tokens = 24, .source = "ngram", .k = 4, .stop_at_eog = 0},
        {.prompt = "def f(x):\n    return x", .max_tokens = 56, .source = "ngram", .k = 6, .adaptive = 1,
         .temperature = 0.8f, .stop_at_eog = 1},
        {.prompt = "    for i in range(10):\n        print(i)\n    for j in range(", .max_tokens = 32,
         .source = "auto", .k = 3, .stop_at_eog = 0},
        /* Starts like request 0: joins mid-way and copies its prompt prefix. */
        {.prompt = "import os\nimport sys\n\ndef main(argv):\n    parser = ", .max_tokens = 30, .source = "ngram",
         .k = 5, .stop_at_eog = 0},
    };
    for (int i = 0; i < kRequests; ++i) {
        tokenize(&rs[i]);
        plain_reference(&rs[i]);
    }
    test_mixed_requests_equal_their_own_output(rs);
    test_kv_budget(&rs[0], &rs[3]);
    test_cancel(rs);
    test_kv_f16_and_max_batch(rs);

    /* A prompt that leaves room for a few tokens only, asking for INT64_MAX of them. */
    static Request long_prompt = {.max_tokens = INT64_MAX, .stop_at_eog = 0};
    const size_t n_ctx = (size_t)rewind_model_n_ctx(g_model);
    long_prompt.n_ids = n_ctx - 20;
    memcpy(long_prompt.ids, rs[1].ids, rs[1].n_ids * sizeof *rs[1].ids);
    for (size_t i = rs[1].n_ids; i < long_prompt.n_ids; ++i) long_prompt.ids[i] = rs[2].ids[1 + i % (rs[2].n_ids - 1)];
    plain_reference(&long_prompt);
    test_bad_requests(&rs[0], &long_prompt);
    test_argument_errors(&rs[1]);

    rewind_context_free(g_ctx);
    rewind_model_free(g_model);
    printf("test_capi_batch: ok\n");
    return 0;
}
