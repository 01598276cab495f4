/* The C API end to end, compiled as C: load, tokenize, append, generate plainly and
 * speculatively (every named source gives plain decoding's tokens), stats, truncate, save and
 * load the cache, detokenize. Exits non-zero naming the first failed check. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi_check.h"
#include "rewind_c.h"

enum { kMax = 48 };

static const char* kPrompt = "def parse_args(argv):\n    parser = argparse.ArgumentParser()\n";

/* A token callback's record: every token it saw, and after how many it stops (0: never). */
typedef struct Seen {
    rewind_token tokens[kMax];
    size_t n;
    size_t stop_after;
} Seen;

static int on_token(rewind_token token, void* user_data) {
    Seen* s = (Seen*)user_data;
    CHECK(s->n < kMax);
    s->tokens[s->n++] = token;
    return s->stop_after == 0 || s->n < s->stop_after;
}

/* The index of the largest of n scores (the first on ties, as greedy sampling takes). */
static rewind_token argmax(const float* x, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return (rewind_token)best;
}

/* A fresh cache holding the prompt. */
static rewind_cache* prompt_cache(const rewind_model* m, rewind_context* ctx, const rewind_token* ids, size_t n) {
    rewind_cache* c = NULL;
    OK(rewind_cache_new(m, 256, 0, &c));
    OK(rewind_append(ctx, c, ids, n));
    CHECK(rewind_cache_n_tokens(c) == (int64_t)n);
    return c;
}

/* The last reply of a chat, in a malloc'd string (asks for its size first). */
static char* chat_reply(const rewind_chat* chat) {
    size_t nb = 0;
    CHECK(rewind_chat_reply(chat, NULL, 0, &nb) == REWIND_ERR_CAPACITY);
    char* s = malloc(nb + 1);
    OK(rewind_chat_reply(chat, s, nb + 1, &nb));
    CHECK(strlen(s) == nb);
    return s;
}

/* Generates from scratch on the ids of `conv` formatted as `cho` says (with a generation
 * prompt): the reply's text, its end-of-turn token left out, as a chat turn gives it. */
static char* fresh_reply(const rewind_model* m, rewind_context* ctx, const rewind_chat_options* cho,
                         const rewind_chat_message* conv, size_t n_conv, const rewind_generate_options* go,
                         int64_t* prompt_tokens) {
    rewind_token pids[512], gen[64];
    size_t np = 0, ng = 0, nb = 0;
    OK(rewind_chat_tokenize(m, cho, conv, n_conv, pids, 512, &np));
    *prompt_tokens = (int64_t)np;
    rewind_cache* c = NULL;
    OK(rewind_cache_new(m, 512, 0, &c));
    OK(rewind_append(ctx, c, pids, np));
    rewind_stats st;
    OK(rewind_generate(ctx, c, go, gen, 64, &ng, &st));
    if (st.stop == REWIND_STOP_END_OF_GENERATION) --ng;
    char* text = malloc(4096);
    OK(rewind_detokenize(m, gen, ng, text, 4096, &nb));
    rewind_cache_free(c);
    return text;
}

static int stop_after_3(rewind_token token, void* user_data) {
    (void)token;
    return ++*(int*)user_data < 3;
}

/* Chat formatting, tokenization and sessions with the built-in ChatML format. */
static void test_chat(const rewind_model* m, rewind_context* ctx) {
    rewind_chat_options cho = rewind_chat_default_options();
    cho.chat_template = "chatml";
    const rewind_chat_message hi[1] = {{"user", "hi"}};
    const char* want = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    size_t nb = 0;
    CHECK(rewind_chat_format(m, &cho, hi, 1, NULL, 0, &nb) == REWIND_ERR_CAPACITY && nb == strlen(want));
    char small[8] = "unset";
    size_t nb2 = 0;
    CHECK(rewind_chat_format(m, &cho, hi, 1, small, nb, &nb2) == REWIND_ERR_CAPACITY); /* no room for the NUL */
    CHECK(nb2 == nb && strcmp(small, "unset") == 0);
    char text[512];
    OK(rewind_chat_format(m, &cho, hi, 1, text, nb + 1, &nb2));
    CHECK(nb2 == nb && strcmp(text, want) == 0);
    cho.add_generation_prompt = 0;
    OK(rewind_chat_format(m, &cho, hi, 1, text, sizeof text, &nb));
    CHECK(strcmp(text, "<|im_start|>user\nhi<|im_end|>\n") == 0);
    cho.add_generation_prompt = 1;

    /* Tokenize: the size, then the ids; they spell the formatted text. */
    size_t nt = 0, nt2 = 0;
    CHECK(rewind_chat_tokenize(m, &cho, hi, 1, NULL, 0, &nt) == REWIND_ERR_CAPACITY && nt > 0);
    rewind_token ids[512];
    OK(rewind_chat_tokenize(m, &cho, hi, 1, ids, nt, &nt2));
    CHECK(nt2 == nt);
    const size_t skip = ids[0] == rewind_model_bos(m) ? 1 : 0;
    OK(rewind_detokenize(m, ids + skip, nt - skip, text, sizeof text, &nb));
    CHECK(strcmp(text, want) == 0);

    /* A session of three turns: each later turn reuses the cache; each reply equals generating
     * from scratch on the formatted conversation's ids. */
    const char* sys = "You write Python.";
    const char* users[3] = {"def add(a, b):", "import os", "class Point:"};
    rewind_generate_options go = rewind_generate_default_options();
    go.max_tokens = 12;
    rewind_chat* chat = NULL;
    OK(rewind_chat_new(m, &cho, sys, 512, 0, &chat));
    CHECK(rewind_chat_n_messages(chat) == 1);
    rewind_chat_message conv[7] = {{"system", sys}};
    size_t n_conv = 1;
    char* replies[3];
    for (int i = 0; i < 3; ++i) {
        rewind_chat_turn t;
        OK(rewind_chat_say(ctx, chat, users[i], &go, NULL, &t));
        conv[n_conv++] = (rewind_chat_message){"user", users[i]};
        int64_t np = 0;
        char* fresh = fresh_reply(m, ctx, &cho, conv, n_conv, &go, &np);
        replies[i] = chat_reply(chat);
        CHECK(strcmp(replies[i], fresh) == 0);
        CHECK(t.prompt_tokens == np && t.reused_tokens + t.run_tokens == t.prompt_tokens);
        CHECK(i == 0 ? t.reused_tokens == 0 : t.reused_tokens > 0);
        CHECK(t.stats.emitted >= 1 && t.stats.emitted <= go.max_tokens);
        conv[n_conv++] = (rewind_chat_message){"assistant", replies[i]};
        CHECK(rewind_chat_n_messages(chat) == n_conv);
        free(fresh);
    }

    /* Speculation gives the same replies; on_token stops a reply after 3 tokens. */
    rewind_chat* spec_chat = NULL;
    OK(rewind_chat_new(m, &cho, sys, 512, 0, &spec_chat));
    rewind_spec_options so = rewind_spec_default_options();
    so.k = 4;
    for (int i = 0; i < 2; ++i) {
        rewind_chat_turn t;
        OK(rewind_chat_say(ctx, spec_chat, users[i], &go, &so, &t));
        char* r = chat_reply(spec_chat);
        CHECK(strcmp(r, replies[i]) == 0 && t.stats.passes <= t.stats.emitted);
        free(r);
    }
    int seen = 0;
    rewind_generate_options stop3 = go;
    stop3.on_token = stop_after_3;
    stop3.user_data = &seen;
    rewind_chat_turn t3;
    OK(rewind_chat_say(ctx, spec_chat, users[2], &stop3, NULL, &t3));
    CHECK(seen == 3 && t3.stats.emitted == 3 && t3.stats.stop == REWIND_STOP_CANCELLED);

    /* Reset keeps the system message only; the next turn runs everything again. */
    OK(rewind_chat_reset(chat));
    CHECK(rewind_chat_n_messages(chat) == 1);
    rewind_chat_turn t;
    OK(rewind_chat_say(ctx, chat, users[0], &go, NULL, &t));
    CHECK(t.reused_tokens == 0);
    char* again = chat_reply(chat);
    CHECK(strcmp(again, replies[0]) == 0);
    free(again);
    for (int i = 0; i < 3; ++i) free(replies[i]);
    rewind_chat_free(spec_chat);
    rewind_chat_free(chat);
    rewind_chat_free(NULL);
}

int main(void) {
    const char* path = REWIND_SHARED_DIR "/models/pycode-4m.gguf";
    const char* draft_path = REWIND_SHARED_DIR "/models/pycode-600k.gguf";
    rewind_model *m = NULL, *draft = NULL;
    OK(rewind_model_load(path, &m));
    OK(rewind_model_load(draft_path, &draft));
    CHECK(rewind_model_n_vocab(m) > 0 && rewind_model_n_ctx(m) >= 256);
    CHECK(strlen(rewind_version()) >= 5);

    /* Tokenize: ask for the size, then fill. */
    size_t n = 0;
    CHECK(rewind_tokenize(m, kPrompt, strlen(kPrompt), -1, NULL, 0, &n) == REWIND_ERR_CAPACITY);
    CHECK(n > 4);
    rewind_token* ids = malloc(n * sizeof *ids);
    size_t n2 = 0;
    OK(rewind_tokenize(m, kPrompt, strlen(kPrompt), -1, ids, n, &n2));
    CHECK(n2 == n);

    rewind_context_options co = rewind_context_default_options();
    co.n_threads = 2;
    rewind_context* ctx = NULL;
    OK(rewind_context_new(m, &co, &ctx));

    /* Plain decoding. */
    rewind_generate_options go = rewind_generate_default_options();
    go.max_tokens = kMax;
    go.stop_at_eog = 0;
    rewind_token plain[kMax], out[kMax];
    size_t n_plain = 0, n_out = 0;
    rewind_stats st;
    rewind_cache* c = prompt_cache(m, ctx, ids, n);
    OK(rewind_generate(ctx, c, &go, plain, kMax, &n_plain, &st));
    CHECK(n_plain == kMax && st.emitted == kMax && st.stop == REWIND_STOP_MAX_TOKENS);
    CHECK(rewind_cache_n_tokens(c) == (int64_t)(n + n_plain));

    /* Speculative decoding with every source gives the same tokens: chains with fixed k, then
     * token trees (3 continuations per node) sized by the cost policy. */
    const char* doc = "def parse_args(argv):\n    parser = argparse.ArgumentParser()\n    parser.add_argument('--x')\n";
    const char* sources[] = {"ngram", "ref", "draft", "auto", "suffix"};
    for (int s = 0; s < 10; ++s) {
        rewind_spec_options so = rewind_spec_default_options();
        so.source = sources[s % 5];
        so.k = 4;
        if (s >= 5) {
            so.k = 10;
            so.branches = 3;
            so.k_policy = REWIND_K_COST;
        }
        if (!strcmp(so.source, "ref") || !strcmp(so.source, "auto")) {
            so.references = &doc;
            so.n_references = 1;
        }
        if (!strcmp(so.source, "draft") || !strcmp(so.source, "auto")) so.draft = draft;
        rewind_cache* cs = prompt_cache(m, ctx, ids, n);
        OK(rewind_generate_speculative(ctx, cs, &go, &so, out, kMax, &n_out, &st));
        CHECK(n_out == n_plain);
        CHECK(memcmp(out, plain, n_out * sizeof *out) == 0);
        CHECK(st.emitted == (int64_t)n_out && st.passes >= 1 && st.passes <= st.emitted);
        CHECK(st.accepted <= st.proposed);
        printf("%-6s %s %lld passes for %lld tokens, %lld/%lld guesses accepted\n", so.source, s >= 5 ? "trees " : "chains",
               (long long)st.passes,
               (long long)st.emitted, (long long)st.accepted, (long long)st.proposed);
        rewind_cache_free(cs);
    }

    /* Penalties, logit_bias and logprobs: speculative decoding gives plain decoding's tokens and
     * log-probability bits (raw and processed, with alternatives). */
    {
        rewind_generate_options gp = go;
        gp.temperature = 0.8f;
        gp.seed = 3;
        gp.frequency_penalty = 0.5f;
        gp.presence_penalty = 0.25f;
        const rewind_token bias_ids[] = {ids[1], ids[2]};
        const float bias_vals[] = {-1.5f, 2.0f};
        gp.logit_bias_tokens = bias_ids;
        gp.logit_bias_values = bias_vals;
        gp.n_logit_bias = 2;
        enum { kTop = 4 };
        for (int processed = 0; processed < 2; ++processed) {
            float lp_plain[kMax], lp_spec[kMax], top_lp[2][kMax * kTop];
            rewind_token top_ids[2][kMax * kTop];
            rewind_logprobs lp = {kTop, processed, lp_plain, top_ids[0], top_lp[0]};
            gp.logprobs = &lp;
            rewind_token pen[kMax];
            size_t n_pen = 0;
            rewind_cache* cp = prompt_cache(m, ctx, ids, n);
            OK(rewind_generate(ctx, cp, &gp, pen, kMax, &n_pen, &st));
            rewind_cache_free(cp);
            CHECK(n_pen == kMax && memcmp(pen, plain, sizeof plain) != 0); /* the penalties acted */
            for (size_t i = 0; i < n_pen; ++i) CHECK(lp_plain[i] <= 0.0f && top_lp[0][i * kTop] >= lp_plain[i]);
            rewind_logprobs ls = {kTop, processed, lp_spec, top_ids[1], top_lp[1]};
            gp.logprobs = &ls;
            rewind_spec_options so = rewind_spec_default_options();
            so.source = "draft";
            so.draft = draft;
            so.k = 5;
            so.branches = 2;
            rewind_cache* cs = prompt_cache(m, ctx, ids, n);
            OK(rewind_generate_speculative(ctx, cs, &gp, &so, out, kMax, &n_out, &st));
            rewind_cache_free(cs);
            CHECK(n_out == n_pen && memcmp(out, pen, n_out * sizeof *out) == 0);
            CHECK(memcmp(lp_spec, lp_plain, n_out * sizeof *lp_spec) == 0);
            CHECK(memcmp(top_ids[1], top_ids[0], n_out * kTop * sizeof(rewind_token)) == 0);
            CHECK(memcmp(top_lp[1], top_lp[0], n_out * kTop * sizeof(float)) == 0);
        }
        /* Out of range: refused, nothing run. */
        rewind_logprobs bad = {21, 0, NULL, NULL, NULL};
        gp.logprobs = &bad;
        rewind_cache* cb = prompt_cache(m, ctx, ids, n);
        CHECK(rewind_generate(ctx, cb, &gp, out, kMax, &n_out, &st) == REWIND_ERR_ARGUMENT);
        gp.logprobs = NULL;
        gp.frequency_penalty = 3.0f;
        CHECK(rewind_generate(ctx, cb, &gp, out, kMax, &n_out, &st) == REWIND_ERR_ARGUMENT);
        CHECK(rewind_cache_n_tokens(cb) == (int64_t)n);
        rewind_cache_free(cb);
    }

    /* A callback that never stops sees every token, in order; one that stops after N leaves the
     * first N tokens (output and cache) and REWIND_STOP_CANCELLED, plainly and speculatively. */
    {
        Seen seen = {{0}, 0, 0};
        go.on_token = on_token;
        go.user_data = &seen;
        rewind_cache* cs = prompt_cache(m, ctx, ids, n);
        OK(rewind_generate(ctx, cs, &go, out, kMax, &n_out, &st));
        CHECK(n_out == n_plain && seen.n == n_plain && st.stop == REWIND_STOP_MAX_TOKENS);
        CHECK(memcmp(seen.tokens, plain, n_plain * sizeof *plain) == 0);
        rewind_cache_free(cs);
        const size_t stops[] = {1, 5, 17};
        for (int i = 0; i < 3; ++i) {
            for (int spec = 0; spec < 2; ++spec) {
                Seen s = {{0}, 0, stops[i]};
                go.user_data = &s;
                cs = prompt_cache(m, ctx, ids, n);
                rewind_spec_options so = rewind_spec_default_options();
                so.k = 6;
                if (spec)
                    OK(rewind_generate_speculative(ctx, cs, &go, &so, out, kMax, &n_out, &st));
                else
                    OK(rewind_generate(ctx, cs, &go, out, kMax, &n_out, &st));
                CHECK(n_out == stops[i] && s.n == stops[i] && st.emitted == (int64_t)stops[i]);
                CHECK(st.stop == REWIND_STOP_CANCELLED);
                CHECK(memcmp(out, plain, n_out * sizeof *out) == 0);
                CHECK(rewind_cache_n_tokens(cs) == (int64_t)(n + stops[i]));
                /* Generating on continues exactly where the unstopped generation went. */
                go.on_token = NULL;
                go.max_tokens = kMax - (int64_t)stops[i];
                OK(rewind_generate(ctx, cs, &go, out, kMax, &n_out, NULL));
                CHECK(n_out == kMax - stops[i] && memcmp(out, plain + stops[i], n_out * sizeof *out) == 0);
                go.on_token = on_token;
                go.max_tokens = kMax;
                rewind_cache_free(cs);
            }
        }
        go.on_token = NULL;
        go.user_data = NULL;
    }

    /* Next logits: their argmax is the token greedy generation picks next, and the cache is
     * unchanged (same ids, generation from it still gives plain's tokens). */
    {
        rewind_cache* cs = prompt_cache(m, ctx, ids, n);
        const float* lg = NULL;
        size_t nv = 0;
        OK(rewind_next_logits(ctx, cs, &lg, &nv));
        CHECK(nv == (size_t)rewind_model_n_vocab(m));
        CHECK(argmax(lg, nv) == plain[0]);
        float* first = malloc(nv * sizeof *first);
        memcpy(first, lg, nv * sizeof *first);
        OK(rewind_next_logits(ctx, cs, &lg, &nv)); /* the same bits again */
        CHECK(memcmp(first, lg, nv * sizeof *first) == 0);
        free(first);
        CHECK(rewind_cache_n_tokens(cs) == (int64_t)n);
        rewind_token seq_ids[256];
        size_t n_seq_ids = 0;
        OK(rewind_cache_tokens(cs, seq_ids, 256, &n_seq_ids));
        CHECK(n_seq_ids == n && memcmp(seq_ids, ids, n * sizeof *ids) == 0);
        /* Step by step: after each generated token, the next logits' argmax is the next one. */
        rewind_generate_options one = go;
        one.max_tokens = 1;
        for (size_t i = 0; i < 12; ++i) {
            OK(rewind_next_logits(ctx, cs, &lg, &nv));
            CHECK(argmax(lg, nv) == plain[i]);
            OK(rewind_generate(ctx, cs, &one, out, kMax, &n_out, NULL));
            CHECK(n_out == 1 && out[0] == plain[i]);
        }
        go.max_tokens = kMax - 12;
        OK(rewind_generate(ctx, cs, &go, out, kMax, &n_out, NULL));
        CHECK(n_out == kMax - 12 && memcmp(out, plain + 12, n_out * sizeof *out) == 0);
        go.max_tokens = kMax;
        rewind_cache_free(cs);
    }

    /* Context options: llama.cpp's numerics and the scalar SIMD level run, and greedy generation
     * still takes the argmax of rewind_next_logits on that context. */
    {
        const char* numerics[] = {"exact", "llamacpp", "exact"};
        const char* simd[] = {NULL, NULL, "scalar"};
        for (int i = 0; i < 3; ++i) {
            rewind_context_options o = rewind_context_default_options();
            o.numerics = numerics[i];
            o.simd = simd[i];
            rewind_context* cx = NULL;
            OK(rewind_context_new(m, &o, &cx));
            rewind_cache* cs = prompt_cache(m, cx, ids, n);
            const float* lg = NULL;
            size_t nv = 0;
            OK(rewind_next_logits(cx, cs, &lg, &nv));
            const rewind_token want = argmax(lg, nv);
            go.max_tokens = 8;
            OK(rewind_generate(cx, cs, &go, out, kMax, &n_out, NULL));
            CHECK(n_out == 8 && out[0] == want);
            if (i == 0) CHECK(memcmp(out, plain, 8 * sizeof *out) == 0);
            printf("numerics %-8s simd %-6s: %d %d %d ...\n", numerics[i], simd[i] ? simd[i] : "best", out[0], out[1],
                   out[2]);
            go.max_tokens = kMax;
            rewind_cache_free(cs);
            rewind_context_free(cx);
        }
    }

    /* Truncate back to the prompt and generate again: same tokens. */
    OK(rewind_cache_truncate(c, (int64_t)n));
    OK(rewind_generate(ctx, c, &go, out, kMax, &n_out, NULL));
    CHECK(n_out == n_plain && memcmp(out, plain, n_out * sizeof *out) == 0);

    /* Save after the prompt + 16 tokens, load with its ids, continue: as if never saved. */
    OK(rewind_cache_truncate(c, (int64_t)n + 16));
    char file[512];
    snprintf(file, sizeof file, "%s/rewind_test_capi_%ld.kv", REWIND_BINARY_DIR, (long)getpid());
    OK(rewind_cache_save(c, file));
    size_t n_seq = 0;
    CHECK(rewind_cache_tokens(c, NULL, 0, &n_seq) == REWIND_ERR_CAPACITY && n_seq == n + 16);
    rewind_token* seq = malloc(n_seq * sizeof *seq);
    OK(rewind_cache_tokens(c, seq, n_seq, &n_seq));
    rewind_cache* loaded = NULL;
    OK(rewind_cache_load(m, file, 256, 0, seq, n_seq, &loaded));
    remove(file);
    go.max_tokens = kMax - 16;
    OK(rewind_generate(ctx, loaded, &go, out, kMax, &n_out, NULL));
    CHECK(n_out == kMax - 16 && memcmp(out, plain + 16, n_out * sizeof *out) == 0);

    /* Detokenize the whole sequence: it starts with the prompt. */
    size_t n_bytes = 0;
    size_t n_all = 0;
    rewind_token all[512];
    OK(rewind_cache_tokens(loaded, all, 512, &n_all));
    CHECK(rewind_detokenize(m, all, n_all, NULL, 0, &n_bytes) == REWIND_ERR_CAPACITY);
    char* text = malloc(n_bytes + 1);
    OK(rewind_detokenize(m, all, n_all, text, n_bytes + 1, &n_bytes));
    CHECK(strncmp(text, kPrompt, strlen(kPrompt)) == 0);
    printf("%s\n", text);

    test_chat(m, ctx);

    free(text);
    free(seq);
    free(ids);
    rewind_cache_free(loaded);
    rewind_cache_free(c);
    rewind_context_free(ctx);
    rewind_model_free(draft);
    rewind_model_free(m);
    printf("test_capi: ok\n");
    return 0;
}
