/* The C API fed bad input, compiled as C: NULL handles and pointers, buffers too small, ids
 * outside the vocabulary, options out of range, a cache from another model, missing and foreign
 * files. Each call returns its documented status, leaves a message in rewind_last_error(), and
 * changes nothing. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rewind_c.h"

static int g_failures = 0;

/* Checks a call's status; on failure also that the last error says something. */
#define EXPECT_STATUS(call, want)                                                                \
    do {                                                                                         \
        rewind_status got_ = (call);                                                             \
        if (got_ != (want)) {                                                                    \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n", __FILE__,    \
                    __LINE__, #call, rewind_status_name(got_), rewind_status_name(want),         \
                    rewind_last_error());                                                        \
            ++g_failures;                                                                        \
        } else if (got_ != REWIND_OK && rewind_last_error()[0] == '\0') {                        \
            fprintf(stderr, "%s:%d: %s: no error message\n", __FILE__, __LINE__, #call);         \
            ++g_failures;                                                                        \
        }                                                                                        \
    } while (0)
#define EXPECT(cond)                                                                             \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
            ++g_failures;                                                                        \
        }                                                                                        \
    } while (0)

int main(void) {
    const char* path = REWIND_SHARED_DIR "/models/pycode-4m.gguf";
    const char* other_path = REWIND_SHARED_DIR "/models/pycode-600k.gguf";
    rewind_model *m = NULL, *other = NULL;
    rewind_token ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    rewind_token out[64];
    size_t n = 0;

    /* Loading. */
    EXPECT_STATUS(rewind_model_load(NULL, &m), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_model_load(path, NULL), REWIND_ERR_ARGUMENT);
    m = (rewind_model*)ids; /* *out is cleared on failure */
    EXPECT_STATUS(rewind_model_load("/nonexistent/model.gguf", &m), REWIND_ERR_IO);
    EXPECT(m == NULL);
    EXPECT(strstr(rewind_last_error(), "/nonexistent/model.gguf") != NULL);
    EXPECT_STATUS(rewind_model_load(REWIND_SHARED_DIR "/vocab/ggml-vocab-llama-spm.gguf", &m), REWIND_ERR_FORMAT);
    EXPECT_STATUS(rewind_model_load(path, &m), REWIND_OK);
    EXPECT_STATUS(rewind_model_load(other_path, &other), REWIND_OK);
    if (!m || !other) return 1;
    EXPECT(rewind_model_n_vocab(NULL) == 0);

    /* Tokenizer. */
    EXPECT_STATUS(rewind_tokenize(NULL, "x", 1, -1, out, 64, &n), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_tokenize(m, NULL, 3, -1, out, 64, &n), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_tokenize(m, "x", 1, 7, out, 64, &n), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_tokenize(m, "def f(x): return x", 18, -1, out, 64, NULL), REWIND_ERR_ARGUMENT);
    out[0] = -7;
    EXPECT_STATUS(rewind_tokenize(m, "def f(x): return x", 18, -1, out, 2, &n), REWIND_ERR_CAPACITY);
    EXPECT(n > 2 && out[0] == -7); /* the size needed; nothing written */
    const rewind_token bad_ids[2] = {1, 1 << 30};
    char buf[16];
    EXPECT_STATUS(rewind_detokenize(m, bad_ids, 2, buf, sizeof buf, &n), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_detokenize(m, NULL, 2, buf, sizeof buf, &n), REWIND_ERR_ARGUMENT);

    /* Contexts and caches. */
    rewind_context* ctx = NULL;
    rewind_context_options co = rewind_context_default_options();
    co.n_threads = 0;
    EXPECT_STATUS(rewind_context_new(m, &co, &ctx), REWIND_ERR_ARGUMENT);
    EXPECT(ctx == NULL);
    EXPECT_STATUS(rewind_context_new(NULL, NULL, &ctx), REWIND_ERR_ARGUMENT);
    /* Unknown names: argument, naming the accepted ones; nothing created. */
    co = rewind_context_default_options();
    co.simd = "sse9";
    EXPECT_STATUS(rewind_context_new(m, &co, &ctx), REWIND_ERR_ARGUMENT);
    EXPECT(ctx == NULL && strstr(rewind_last_error(), "sse9") && strstr(rewind_last_error(), "scalar"));
    co = rewind_context_default_options();
    co.numerics = "fast";
    EXPECT_STATUS(rewind_context_new(m, &co, &ctx), REWIND_ERR_ARGUMENT);
    EXPECT(ctx == NULL && strstr(rewind_last_error(), "fast") && strstr(rewind_last_error(), "llamacpp"));
    co = rewind_context_default_options();
    co.device = "tpu";
    EXPECT_STATUS(rewind_context_new(m, &co, &ctx), REWIND_ERR_ARGUMENT);
    EXPECT(ctx == NULL && strstr(rewind_last_error(), "tpu") && strstr(rewind_last_error(), "cuda"));
    /* A CUDA device that cannot run here (no CUDA build, no GPU, or no device 999): unsupported. */
    co.device = "cuda:999";
    EXPECT_STATUS(rewind_context_new(m, &co, &ctx), REWIND_ERR_UNSUPPORTED);
    EXPECT(ctx == NULL);
    {
        /* "cuda" (device 0): a context where a GPU is present, else unsupported, never a crash. */
        co.device = "cuda";
        rewind_status st = rewind_context_new(m, &co, &ctx);
        EXPECT(st == REWIND_OK || st == REWIND_ERR_UNSUPPORTED);
        EXPECT((st == REWIND_OK) == (ctx != NULL));
        printf("device cuda: %s%s%s\n", rewind_status_name(st), st ? ": " : "", st ? rewind_last_error() : "");
        rewind_context_free(ctx);
        ctx = NULL;
    }
    /* Every SIMD level: a context where the CPU has it, else unsupported naming the CPU's best. */
    {
        const char* levels[] = {"scalar", "avx2", "avx-vnni", "avx512"};
        co = rewind_context_default_options();
        for (int i = 0; i < 4; ++i) {
            co.simd = levels[i];
            rewind_status st = rewind_context_new(m, &co, &ctx);
            EXPECT(st == REWIND_OK || st == REWIND_ERR_UNSUPPORTED);
            EXPECT((st == REWIND_OK) == (ctx != NULL));
            if (i == 0) EXPECT(st == REWIND_OK); /* every CPU runs scalar */
            rewind_context_free(ctx);
            ctx = NULL;
        }
    }
    EXPECT_STATUS(rewind_context_new(m, NULL, &ctx), REWIND_OK);
    rewind_cache *c = NULL, *foreign = NULL;
    EXPECT_STATUS(rewind_cache_new(m, -1, 0, &c), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_cache_new(m, 1 << 30, 0, &c), REWIND_ERR_CAPACITY);
    EXPECT_STATUS(rewind_cache_new(m, 16, 0, &c), REWIND_OK);
    EXPECT_STATUS(rewind_cache_new(other, 16, 0, &foreign), REWIND_OK);
    if (!ctx || !c || !foreign) return 1;

    /* Appending: NULLs, ids outside the vocabulary, overflow, another model's cache. */
    EXPECT_STATUS(rewind_append(NULL, c, ids, 8), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_append(ctx, NULL, ids, 8), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_append(ctx, c, NULL, 8), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_append(ctx, c, bad_ids, 2), REWIND_ERR_ARGUMENT);
    EXPECT(rewind_cache_n_tokens(c) == 0);
    EXPECT_STATUS(rewind_append(ctx, foreign, ids, 8), REWIND_ERR_STATE);
    EXPECT(rewind_cache_n_tokens(foreign) == 0);
    EXPECT_STATUS(rewind_append(ctx, c, ids, 8), REWIND_OK);
    EXPECT_STATUS(rewind_append(ctx, c, ids, 8), REWIND_OK);
    EXPECT_STATUS(rewind_append(ctx, c, ids, 1), REWIND_ERR_CAPACITY); /* 17 > 16 */
    EXPECT(rewind_cache_n_tokens(c) == 16);

    /* Generation: an empty sequence, buffers, options, sources. */
    rewind_generate_options go = rewind_generate_default_options();
    go.max_tokens = 4;
    rewind_cache* empty = NULL;
    EXPECT_STATUS(rewind_cache_new(m, 16, 0, &empty), REWIND_OK);
    EXPECT_STATUS(rewind_generate(ctx, empty, &go, out, 64, &n, NULL), REWIND_ERR_STATE);
    EXPECT_STATUS(rewind_cache_truncate(c, 8), REWIND_OK);
    EXPECT_STATUS(rewind_generate(ctx, c, NULL, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_generate(ctx, c, &go, out, 3, &n, NULL), REWIND_ERR_ARGUMENT); /* room for 3 of 4 */
    EXPECT_STATUS(rewind_generate(ctx, c, &go, NULL, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    go.top_p = 2.0f;
    EXPECT_STATUS(rewind_generate(ctx, c, &go, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    go.top_p = 1.0f;
    EXPECT_STATUS(rewind_generate(ctx, foreign, &go, out, 64, &n, NULL), REWIND_ERR_STATE);
    EXPECT(rewind_cache_n_tokens(c) == 8);

    rewind_spec_options so = rewind_spec_default_options();
    so.source = "telepathy";
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, &so, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    EXPECT(strstr(rewind_last_error(), "ngram") != NULL); /* names the choices */
    so.source = "ref"; /* without documents */
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, &so, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    so.source = "ngram";
    so.k = 0;
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, &so, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    so.k = 4;
    so.k_policy = 7; /* no rewind_k_policy */
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, &so, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    EXPECT(strstr(rewind_last_error(), "k_policy") != NULL);
    so.k_policy = REWIND_K_FIXED;
    so.branches = -1;
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, &so, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    so.branches = 65;
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, &so, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    EXPECT(strstr(rewind_last_error(), "branches") != NULL);
    so.branches = 0;
    so.source = NULL;
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, &so, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_generate_speculative(ctx, c, &go, NULL, out, 64, &n, NULL), REWIND_ERR_ARGUMENT);
    EXPECT(rewind_cache_n_tokens(c) == 8);

    /* Next logits: NULLs, an empty sequence, another model's cache; the outputs untouched. */
    {
        const float sentinel = 0.0f;
        const float* lg = &sentinel;
        size_t nv = 7;
        EXPECT_STATUS(rewind_next_logits(NULL, c, &lg, &nv), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_next_logits(ctx, NULL, &lg, &nv), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_next_logits(ctx, c, NULL, &nv), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_next_logits(ctx, c, &lg, NULL), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_next_logits(ctx, empty, &lg, &nv), REWIND_ERR_STATE);
        EXPECT(strstr(rewind_last_error(), "no tokens") != NULL);
        EXPECT_STATUS(rewind_next_logits(ctx, foreign, &lg, &nv), REWIND_ERR_STATE);
        EXPECT(lg == &sentinel && nv == 7);
        EXPECT(rewind_cache_n_tokens(c) == 8);
        /* A sequence filling its cache: the held-back token still has its position. */
        rewind_cache* full = NULL;
        EXPECT_STATUS(rewind_cache_new(m, 4, 0, &full), REWIND_OK);
        EXPECT_STATUS(rewind_append(ctx, full, ids, 4), REWIND_OK);
        EXPECT_STATUS(rewind_next_logits(ctx, full, &lg, &nv), REWIND_OK);
        EXPECT(lg != &sentinel && rewind_cache_n_tokens(full) == 4);
        rewind_cache_free(full);
        lg = &sentinel;
        nv = 7;
        EXPECT_STATUS(rewind_next_logits(ctx, c, &lg, &nv), REWIND_OK);
        EXPECT(lg != &sentinel && nv == (size_t)rewind_model_n_vocab(m) && rewind_cache_n_tokens(c) == 8);
    }

    /* Truncate, save and load. */
    EXPECT_STATUS(rewind_cache_truncate(NULL, 0), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_cache_truncate(c, 9), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_cache_truncate(c, -1), REWIND_ERR_ARGUMENT);
    EXPECT(rewind_cache_n_tokens(c) == 8);
    EXPECT_STATUS(rewind_cache_save(c, "/nonexistent/dir/x.kv"), REWIND_ERR_IO);
    char file[512];
    snprintf(file, sizeof file, "%s/rewind_test_capi_errors_%ld.kv", REWIND_BINARY_DIR, (long)getpid());
    EXPECT_STATUS(rewind_cache_save(c, file), REWIND_OK);
    rewind_cache* loaded = NULL;
    EXPECT_STATUS(rewind_cache_load(other, file, 0, 0, ids, 8, &loaded), REWIND_ERR_STATE); /* another model */
    EXPECT_STATUS(rewind_cache_load(m, file, 0, 0, ids, 5, &loaded), REWIND_ERR_STATE);     /* 5 ids for 7 positions */
    EXPECT_STATUS(rewind_cache_load(m, file, 0, 0, NULL, 8, &loaded), REWIND_ERR_ARGUMENT);
    EXPECT_STATUS(rewind_cache_load(m, "/nonexistent.kv", 0, 0, ids, 8, &loaded), REWIND_ERR_IO);
    EXPECT(loaded == NULL);
    EXPECT_STATUS(rewind_cache_load(m, file, 0, 0, ids, 8, &loaded), REWIND_OK);
    FILE* f = fopen(file, "wb");
    if (f) {
        fputs("not a cache", f);
        fclose(f);
    }
    rewind_cache* junk = NULL;
    EXPECT_STATUS(rewind_cache_load(m, file, 0, 0, ids, 8, &junk), REWIND_ERR_FORMAT);
    remove(file);

    /* Freeing NULL is a no-op. */
    rewind_model_free(NULL);
    /* Chat: NULL arguments, an unknown role, a model without a template and no format named.
     * Nothing is written on failure. */
    {
        rewind_chat_options cho = rewind_chat_default_options();
        cho.chat_template = "chatml";
        const rewind_chat_message ok_msg[1] = {{"user", "hi"}};
        const rewind_chat_message bad_role[1] = {{"robot", "hi"}};
        const rewind_chat_message null_content[1] = {{"user", NULL}};
        char buf[64] = "unset";
        rewind_token tbuf[64];
        size_t nb = 7;
        EXPECT_STATUS(rewind_chat_format(NULL, &cho, ok_msg, 1, buf, sizeof buf, &nb), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_format(m, &cho, ok_msg, 1, buf, sizeof buf, NULL), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_format(m, &cho, NULL, 1, buf, sizeof buf, &nb), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_format(m, &cho, ok_msg, 0, buf, sizeof buf, &nb), REWIND_ERR_ARGUMENT); /* empty */
        EXPECT_STATUS(rewind_chat_format(m, &cho, null_content, 1, buf, sizeof buf, &nb), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_format(m, &cho, bad_role, 1, buf, sizeof buf, &nb), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_tokenize(m, &cho, bad_role, 1, tbuf, 64, &nb), REWIND_ERR_ARGUMENT);
        EXPECT(strstr(rewind_last_error(), "robot") != NULL);
        EXPECT_STATUS(rewind_chat_format(m, NULL, ok_msg, 1, buf, sizeof buf, &nb), REWIND_ERR_UNSUPPORTED);
        EXPECT_STATUS(rewind_chat_tokenize(m, NULL, ok_msg, 1, tbuf, 64, &nb), REWIND_ERR_UNSUPPORTED);
        cho.chat_template = "no-such-format";
        EXPECT_STATUS(rewind_chat_format(m, &cho, ok_msg, 1, buf, sizeof buf, &nb), REWIND_ERR_ARGUMENT);
        EXPECT(nb == 7 && strcmp(buf, "unset") == 0);
        cho.chat_template = "chatml";

        rewind_chat* chat = (rewind_chat*)&cho; /* set to NULL on failure */
        EXPECT_STATUS(rewind_chat_new(NULL, &cho, NULL, 0, 0, &chat), REWIND_ERR_ARGUMENT);
        EXPECT(chat == NULL);
        EXPECT_STATUS(rewind_chat_new(m, &cho, NULL, 0, 0, NULL), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_new(m, NULL, NULL, 0, 0, &chat), REWIND_ERR_UNSUPPORTED);
        EXPECT(chat == NULL);
        EXPECT_STATUS(rewind_chat_new(m, &cho, NULL, 1 << 30, 0, &chat), REWIND_ERR_CAPACITY);
        EXPECT_STATUS(rewind_chat_new(m, &cho, NULL, 24, 0, &chat), REWIND_OK);
        rewind_generate_options go = rewind_generate_default_options();
        go.max_tokens = 4;
        EXPECT_STATUS(rewind_chat_say(NULL, chat, "hi", &go, NULL, NULL), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_say(ctx, NULL, "hi", &go, NULL, NULL), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_say(ctx, chat, NULL, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
        go.max_tokens = -1;
        EXPECT_STATUS(rewind_chat_say(ctx, chat, "hi", &go, NULL, NULL), REWIND_ERR_ARGUMENT);
        go.max_tokens = 4;
        rewind_spec_options so = rewind_spec_default_options();
        so.source = "no-such-source";
        EXPECT_STATUS(rewind_chat_say(ctx, chat, "hi", &go, &so, NULL), REWIND_ERR_ARGUMENT);
        EXPECT(rewind_chat_n_messages(chat) == 0);
        /* A turn longer than the 24-position cache: capacity, nothing recorded. */
        EXPECT_STATUS(rewind_chat_say(ctx, chat, "def parse_args(argv): parser = argparse.ArgumentParser()", &go, NULL, NULL),
                      REWIND_ERR_CAPACITY);
        EXPECT(rewind_chat_n_messages(chat) == 0);
        nb = 7;
        EXPECT_STATUS(rewind_chat_reply(chat, buf, sizeof buf, &nb), REWIND_OK);
        EXPECT(nb == 0 && buf[0] == '\0');
        EXPECT_STATUS(rewind_chat_reply(NULL, buf, sizeof buf, &nb), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_chat_reset(NULL), REWIND_ERR_ARGUMENT);
        EXPECT(rewind_chat_n_messages(NULL) == 0);
        rewind_chat_free(chat);
        rewind_chat_free(NULL);
    }

    /* Hugging Face past_key_values: a round trip, then every refusal (out cleared, nothing made). */
    {
        rewind_kv_shape ks;
        EXPECT_STATUS(rewind_model_kv_shape(NULL, &ks), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_model_kv_shape(m, NULL), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_model_kv_shape(m, &ks), REWIND_OK);
        EXPECT(ks.n_layer == 6 && ks.n_head_kv == 2 && ks.head_dim == 32 && ks.hf_keys_permuted == 1);
        EXPECT(strcmp(ks.architecture, "llama") == 0);
        rewind_cache* src = NULL;
        EXPECT_STATUS(rewind_cache_new(m, 32, 0, &src), REWIND_OK);
        EXPECT_STATUS(rewind_append(ctx, src, ids, 8), REWIND_OK);
        EXPECT(rewind_cache_n_positions(src) == 7 && rewind_cache_n_positions(NULL) == 0);
        enum { L = 6, T = 7, H = 2, D = 32, PER = H * T * D };
        static float k32[L][PER], v32[L][PER], k2[L][PER], v2[L][PER];
        static unsigned short k16[L][PER], v16[L][PER], k16b[L][PER], v16b[L][PER];
        void *kp[L], *vp[L], *kp2[L], *vp2[L], *kh[L], *vh[L], *kh2[L], *vh2[L];
        const void *ckp[L], *cvp[L], *ckh[L], *cvh[L];
        for (int l = 0; l < L; ++l) {
            kp[l] = k32[l], vp[l] = v32[l], kp2[l] = k2[l], vp2[l] = v2[l];
            kh[l] = k16[l], vh[l] = v16[l], kh2[l] = k16b[l], vh2[l] = v16b[l];
            ckp[l] = k32[l], cvp[l] = v32[l], ckh[l] = k16[l], cvh[l] = v16[l];
        }
        EXPECT_STATUS(rewind_cache_export_hf(src, REWIND_DTYPE_F32, kp, vp, L, H, T, D), REWIND_OK);
        EXPECT_STATUS(rewind_cache_export_hf(src, REWIND_DTYPE_F16, kh, vh, L, H, T, D), REWIND_OK);
        rewind_cache* back = NULL;
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, ids, 8, &back), REWIND_OK);
        EXPECT(back != NULL && rewind_cache_n_tokens(back) == 8 && rewind_cache_n_positions(back) == 7);
        EXPECT_STATUS(rewind_cache_export_hf(back, REWIND_DTYPE_F32, kp2, vp2, L, H, T, D), REWIND_OK);
        EXPECT(memcmp(k2, k32, sizeof k32) == 0 && memcmp(v2, v32, sizeof v32) == 0);
        rewind_cache_free(back);
        back = NULL;
        /* F16 arrays into an F16 cache, and only the positions' ids: the last position is held back. */
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 1, REWIND_DTYPE_F16, ckh, cvh, L, H, T, D, ids, 7, &back), REWIND_OK);
        EXPECT(back != NULL && rewind_cache_n_tokens(back) == 7 && rewind_cache_n_positions(back) == 6);
        rewind_cache_free(back);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 1, REWIND_DTYPE_F16, ckh, cvh, L, H, T, D, ids, 8, &back), REWIND_OK);
        EXPECT_STATUS(rewind_cache_export_hf(back, REWIND_DTYPE_F16, kh2, vh2, L, H, T, D), REWIND_OK);
        EXPECT(memcmp(k16b, k16, sizeof k16) == 0 && memcmp(v16b, v16, sizeof v16) == 0);
        rewind_cache_free(back);

        back = (rewind_cache*)&ks;
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L - 1, H, T, D, ids, 8, &back),
                      REWIND_ERR_SHAPE);
        EXPECT(back == NULL);
        EXPECT(strstr(rewind_last_error(), "layer count 5") != NULL);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H + 1, T, D, ids, 8, &back),
                      REWIND_ERR_SHAPE);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D / 2, ids, 8, &back),
                      REWIND_ERR_SHAPE);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, ids, 6, &back),
                      REWIND_ERR_STATE);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, 7, ckp, cvp, L, H, T, D, ids, 8, &back),
                      REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, NULL, cvp, L, H, T, D, ids, 8, &back),
                      REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, NULL, 8, &back),
                      REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, -1, D, ids, 0, &back),
                      REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_cache_import_hf(m, 4, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, ids, 8, &back),
                      REWIND_ERR_CAPACITY);
        /* A length far past the context with only 8 ids: refused by the count before anything is read. */
        EXPECT_STATUS(rewind_cache_import_hf(m, 0, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, (int64_t)1 << 40, D, ids, 8, &back),
                      REWIND_ERR_STATE);
        EXPECT_STATUS(rewind_cache_import_hf(NULL, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, ids, 8, &back),
                      REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, ids, 8, NULL),
                      REWIND_ERR_ARGUMENT);
        rewind_token bad_ids[8] = {1, 2, 3, 4, 5, 6, 7, 1 << 20};
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, bad_ids, 8, &back),
                      REWIND_ERR_ARGUMENT);
        const float saved = k32[2][5];
        k32[2][5] = NAN;
        EXPECT_STATUS(rewind_cache_import_hf(m, 32, 0, REWIND_DTYPE_F32, ckp, cvp, L, H, T, D, ids, 8, &back),
                      REWIND_ERR_ARGUMENT);
        k32[2][5] = saved;
        EXPECT(back == NULL);
        EXPECT_STATUS(rewind_cache_export_hf(src, REWIND_DTYPE_F32, kp2, vp2, L, H, T + 1, D), REWIND_ERR_SHAPE);
        EXPECT_STATUS(rewind_cache_export_hf(src, REWIND_DTYPE_F32, kp2, vp2, L + 1, H, T, D), REWIND_ERR_SHAPE);
        EXPECT_STATUS(rewind_cache_export_hf(src, 2, kp2, vp2, L, H, T, D), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_cache_export_hf(src, REWIND_DTYPE_F32, NULL, vp2, L, H, T, D), REWIND_ERR_ARGUMENT);
        EXPECT_STATUS(rewind_cache_export_hf(NULL, REWIND_DTYPE_F32, kp2, vp2, L, H, T, D), REWIND_ERR_ARGUMENT);
        rewind_cache_free(src);
    }

    rewind_context_free(NULL);
    rewind_cache_free(NULL);

    rewind_cache_free(loaded);
    rewind_cache_free(empty);
    rewind_cache_free(foreign);
    rewind_cache_free(c);
    rewind_context_free(ctx);
    rewind_model_free(other);
    rewind_model_free(m);
    if (g_failures) {
        fprintf(stderr, "test_capi_errors: %d failures\n", g_failures);
        return 1;
    }
    printf("test_capi_errors: ok\n");
    return 0;
}
