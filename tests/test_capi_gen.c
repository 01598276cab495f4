/* The C API's guidance-style programs and constrained generation, compiled as C: a program of
 * appended text and rewind_gen calls (regex, JSON Schema, GBNF, stop strings) gives the same text
 * and ids plainly and with every source, "forced" alone included; captured texts are in their
 * language; rewind_generate, rewind_generate_speculative and a batch request under a constraint
 * agree; a chat turn under a constraint equals its generation from scratch, plain or
 * speculating; errors come before anything runs, the cache (or conversation) unchanged. Exits
 * non-zero naming the first failed check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "rewind_c.h"

#define FAILS(call, want)                      \
    do {                                       \
        CHECK((call) == (want));               \
        CHECK(rewind_last_error()[0] != '\0'); \
    } while (0)

enum { kMaxIds = 512, kMaxText = 1024 };

static rewind_model* g_model;
static rewind_context* g_ctx;

static const char* const kSchema =
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12},"
    " \"size\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 999}},"
    " \"required\": [\"name\", \"size\"], \"additionalProperties\": false}";

typedef struct Program {
    char texts[3][kMaxText]; /* each gen's captured text */
    rewind_gen_result results[3];
    rewind_token ids[kMaxIds]; /* the cache's whole sequence at the end */
    size_t n_ids;
} Program;

static void append(rewind_cache* c, const char* text) {
    const int64_t before = rewind_cache_n_tokens(c);
    OK(rewind_append_text(g_ctx, c, text, strlen(text)));
    CHECK(rewind_cache_n_tokens(c) > before);
}

static void gen(rewind_cache* c, const rewind_generate_options* go, const rewind_spec_options* spec,
                rewind_gen_result* r, char* text) {
    size_t n = 0;
    OK(rewind_gen(g_ctx, c, go, spec, r));
    OK(rewind_gen_text(c, text, kMaxText, &n));
    CHECK(n == r->text_bytes && strlen(text) == n);
}

/* append, gen regex, append, gen json_schema, append, gen with a stop string. */
static void run_program(const char* source, Program* p) {
    rewind_cache* c = NULL;
    OK(rewind_cache_new(g_model, kMaxIds, 0, &c));
    rewind_spec_options so = rewind_spec_default_options();
    so.source = source;
    so.k = 6;
    const rewind_spec_options* spec = source ? &so : NULL;
    rewind_generate_options go = rewind_generate_default_options();

    append(c, "def scale(x):\n    return x * ");
    go.regex = "[0-9]{1,3}";
    go.max_tokens = 8;
    gen(c, &go, spec, &p->results[0], p->texts[0]);
    go.regex = NULL;

    append(c, "\n\nconfig = ");
    go.json_schema = kSchema;
    go.max_tokens = 40;
    gen(c, &go, spec, &p->results[1], p->texts[1]);
    go.json_schema = NULL;

    append(c, "\n# ");
    const char* stops[] = {"\n"};
    go.stop_strings = stops;
    go.n_stop_strings = 1;
    go.max_tokens = 30;
    gen(c, &go, spec, &p->results[2], p->texts[2]);
    OK(rewind_cache_tokens(c, p->ids, kMaxIds, &p->n_ids));
    rewind_cache_free(c);
}

static int all_digits(const char* s) {
    if (!*s || strlen(s) > 3) return 0;
    for (; *s; ++s)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

static void test_program_equals_plain(void) {
    static Program plain, spec;
    run_program(NULL, &plain);
    CHECK(plain.results[0].stats.stop == REWIND_STOP_END_OF_GENERATION && plain.results[0].complete);
    CHECK(all_digits(plain.texts[0]));
    CHECK(plain.results[1].stats.stop == REWIND_STOP_END_OF_GENERATION && plain.results[1].complete);
    CHECK(strncmp(plain.texts[1], "{\"name\":\"", 9) == 0 && strstr(plain.texts[1], "\",\"size\":") != NULL);
    CHECK(plain.texts[1][strlen(plain.texts[1]) - 1] == '}');
    CHECK(strchr(plain.texts[2], '\n') == NULL);
    for (int i = 0; i < 3; ++i) {
        CHECK(plain.results[i].stats.passes == plain.results[i].stats.emitted);
        CHECK(plain.results[i].stats.proposed == 0);
    }
    printf("plain: '%s' | '%s' | '%s'\n", plain.texts[0], plain.texts[1], plain.texts[2]);
    const char* sources[] = {"forced", "ngram", "suffix", "auto"};
    for (size_t s = 0; s < sizeof sources / sizeof *sources; ++s) {
        run_program(sources[s], &spec);
        CHECK(spec.n_ids == plain.n_ids && memcmp(spec.ids, plain.ids, plain.n_ids * sizeof *plain.ids) == 0);
        for (int i = 0; i < 3; ++i) {
            CHECK(strcmp(spec.texts[i], plain.texts[i]) == 0);
            CHECK(spec.results[i].n_tokens == plain.results[i].n_tokens);
            CHECK(spec.results[i].stats.stop == plain.results[i].stats.stop);
            CHECK(spec.results[i].stats.passes <= plain.results[i].stats.passes);
        }
        CHECK(spec.results[1].forced_proposed > 0 && spec.results[1].forced_accepted > 0);
        CHECK(spec.results[1].forced_accepted <= spec.results[1].stats.accepted);
        printf("%s: JSON in %lld passes for %lld tokens (plain: %lld), %lld/%lld forced guesses accepted\n",
               sources[s], (long long)spec.results[1].stats.passes, (long long)spec.results[1].n_tokens,
               (long long)plain.results[1].stats.passes, (long long)spec.results[1].forced_accepted,
               (long long)spec.results[1].forced_proposed);
    }
}

/* rewind_generate, rewind_generate_speculative and a batch request under the same schema give the
 * same ids; the text is a complete JSON object. */
static void test_plain_generate_under_a_constraint(void) {
    const char* prompt = "config = ";
    rewind_token ids[64], a[kMaxIds], b[kMaxIds], c_out[kMaxIds];
    size_t n_ids = 0, na = 0, nb = 0, nc = 0;
    OK(rewind_tokenize(g_model, prompt, strlen(prompt), -1, ids, 64, &n_ids));
    rewind_generate_options go = rewind_generate_default_options();
    go.json_schema = kSchema;
    go.max_tokens = 60;
    rewind_stats st;
    rewind_cache* c = NULL;
    OK(rewind_cache_new(g_model, kMaxIds, 0, &c));
    OK(rewind_append(g_ctx, c, ids, n_ids));
    OK(rewind_generate(g_ctx, c, &go, a, kMaxIds, &na, &st));
    CHECK(st.stop == REWIND_STOP_END_OF_GENERATION);
    char text[kMaxText];
    size_t n_text = 0;
    OK(rewind_detokenize(g_model, a, na - 1, text, kMaxText, &n_text)); /* the end token left out */
    CHECK(text[0] == '{' && text[n_text - 1] == '}');
    rewind_cache_free(c);

    c = NULL;
    OK(rewind_cache_new(g_model, kMaxIds, 0, &c));
    OK(rewind_append(g_ctx, c, ids, n_ids));
    rewind_spec_options so = rewind_spec_default_options();
    so.source = "forced";
    OK(rewind_generate_speculative(g_ctx, c, &go, &so, b, kMaxIds, &nb, &st));
    CHECK(nb == na && memcmp(a, b, na * sizeof *a) == 0);
    CHECK(st.passes < (int64_t)nb && st.accepted > 0);
    rewind_cache_free(c);

    rewind_batch* batch = NULL;
    OK(rewind_batch_new(g_model, NULL, NULL, &batch));
    uint64_t id = 0;
    so.source = "ngram";
    OK(rewind_batch_add(batch, ids, n_ids, &go, &so, &id));
    int64_t active = 1;
    while (active > 0) OK(rewind_batch_step(batch, &active));
    OK(rewind_batch_take(batch, id, c_out, kMaxIds, &nc, NULL));
    CHECK(nc == na && memcmp(a, c_out, na * sizeof *a) == 0);
    rewind_batch_free(batch);
    printf("constrained generate: %zu tokens, %s\n", na, text);
}

/* Errors come before anything runs: the cache's ids and the last captured text are unchanged. */
static void test_errors_change_nothing(void) {
    rewind_cache* c = NULL;
    OK(rewind_cache_new(g_model, kMaxIds, 0, &c));
    rewind_generate_options go = rewind_generate_default_options();
    go.max_tokens = 4;
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_STATE); /* empty */
    append(c, "x = ");
    go.regex = "[0-9]";
    OK(rewind_gen(g_ctx, c, &go, NULL, NULL));
    const int64_t n = rewind_cache_n_tokens(c);
    char before[kMaxText], after[kMaxText];
    size_t nb = 0, na = 0;
    OK(rewind_gen_text(c, before, kMaxText, &nb));
    CHECK(nb == 1);

    go.json_schema = "{}"; /* two constraints */
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    CHECK(strstr(rewind_last_error(), "at most one") != NULL);
    go.json_schema = NULL;
    go.regex = "(ab";
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    CHECK(strstr(rewind_last_error(), "regex") != NULL);
    go.regex = NULL;
    go.json_schema = "{\"type\": \"object\", \"minProperties\": 1}";
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    CHECK(strstr(rewind_last_error(), "minProperties") != NULL);
    go.json_schema = "{not json";
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_FORMAT);
    go.json_schema = NULL;
    go.grammar = "root ::= (";
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    rewind_token out[8];
    size_t n_out = 0;
    FAILS(rewind_generate(g_ctx, c, &go, out, 8, &n_out, NULL), REWIND_ERR_ARGUMENT);
    go.grammar = NULL;
    go.json_whitespace = 2;
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    go.json_whitespace = 0;
    rewind_logprobs lp = {0};
    go.logprobs = &lp;
    FAILS(rewind_gen(g_ctx, c, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    go.logprobs = NULL;
    FAILS(rewind_gen(NULL, c, &go, NULL, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_gen_text(c, NULL, 0, NULL), REWIND_ERR_ARGUMENT);
    FAILS(rewind_gen_text(c, after, 1, &na), REWIND_ERR_CAPACITY);
    CHECK(na == 1);

    CHECK(rewind_cache_n_tokens(c) == n);
    OK(rewind_gen_text(c, after, kMaxText, &na));
    CHECK(na == nb && strcmp(before, after) == 0);
    rewind_cache_free(c);
}

/* The reply of `chat`, into text (kMaxText bytes). */
static void reply_of(const rewind_chat* chat, char* text) {
    size_t n = 0;
    OK(rewind_chat_reply(chat, text, kMaxText, &n));
    CHECK(strlen(text) == n);
}

/* A constrained chat turn: the reply equals generating under the same constraint from the
 * formatted conversation from scratch, plainly and speculating; a bad constraint fails with the
 * conversation untouched. */
static void test_constrained_chat(void) {
    rewind_chat_options cho = rewind_chat_default_options();
    cho.chat_template = "chatml";
    const char* users[2] = {"describe the config", "pick a number"};
    const char* sources[3] = {NULL, "forced", "ngram"};
    char replies[3][2][kMaxText];
    for (int s = 0; s < 3; ++s) {
        rewind_chat* chat = NULL;
        OK(rewind_chat_new(g_model, &cho, "You answer in JSON.", kMaxIds, 0, &chat));
        rewind_spec_options so = rewind_spec_default_options();
        so.source = sources[s];
        so.k = 6;
        rewind_generate_options go = rewind_generate_default_options();
        go.max_tokens = 60;
        go.json_schema = kSchema;
        rewind_chat_turn t;
        OK(rewind_chat_say(g_ctx, chat, users[0], &go, sources[s] ? &so : NULL, &t));
        CHECK(t.stats.stop == REWIND_STOP_END_OF_GENERATION);
        /* The schema's forced text ("{\"name\":\"") is guessed: fewer passes than tokens. */
        CHECK(sources[s] ? t.stats.passes < t.stats.emitted && t.stats.accepted > 0
                         : t.stats.passes == t.stats.emitted);
        reply_of(chat, replies[s][0]);
        go.json_schema = NULL;
        go.regex = "[0-9]{1,3}";
        OK(rewind_chat_say(g_ctx, chat, users[1], &go, sources[s] ? &so : NULL, &t));
        CHECK(t.stats.stop == REWIND_STOP_END_OF_GENERATION && t.reused_tokens > 0);
        reply_of(chat, replies[s][1]);
        CHECK(all_digits(replies[s][1]));
        CHECK(strcmp(replies[s][0], replies[0][0]) == 0 && strcmp(replies[s][1], replies[0][1]) == 0);

        /* Refused constraints leave the messages and the last reply as they were. */
        const size_t n_messages = rewind_chat_n_messages(chat);
        go.regex = "(ab";
        FAILS(rewind_chat_say(g_ctx, chat, "again", &go, NULL, &t), REWIND_ERR_ARGUMENT);
        CHECK(strstr(rewind_last_error(), "regex") != NULL);
        go.json_schema = "{}"; /* two constraints */
        FAILS(rewind_chat_say(g_ctx, chat, "again", &go, NULL, &t), REWIND_ERR_ARGUMENT);
        go.regex = NULL;
        go.json_schema = "{not json";
        FAILS(rewind_chat_say(g_ctx, chat, "again", &go, NULL, &t), REWIND_ERR_FORMAT);
        go.json_schema = NULL;
        go.grammar = "root ::= (";
        FAILS(rewind_chat_say(g_ctx, chat, "again", &go, sources[s] ? &so : NULL, &t), REWIND_ERR_ARGUMENT);
        CHECK(rewind_chat_n_messages(chat) == n_messages);
        char last[kMaxText];
        reply_of(chat, last);
        CHECK(strcmp(last, replies[s][1]) == 0);
        rewind_chat_free(chat);
    }
    CHECK(strncmp(replies[0][0], "{\"name\":\"", 9) == 0 && replies[0][0][strlen(replies[0][0]) - 1] == '}');

    /* From scratch: the formatted conversation, then rewind_generate under the schema. */
    const rewind_chat_message conv[2] = {{"system", "You answer in JSON."}, {"user", users[0]}};
    rewind_token ids[kMaxIds], out[kMaxIds];
    size_t n_ids = 0, n_out = 0, n_text = 0;
    OK(rewind_chat_tokenize(g_model, &cho, conv, 2, ids, kMaxIds, &n_ids));
    rewind_cache* c = NULL;
    OK(rewind_cache_new(g_model, kMaxIds, 0, &c));
    OK(rewind_append(g_ctx, c, ids, n_ids));
    rewind_generate_options go = rewind_generate_default_options();
    go.max_tokens = 60;
    go.json_schema = kSchema;
    rewind_stats st;
    OK(rewind_generate(g_ctx, c, &go, out, kMaxIds, &n_out, &st));
    CHECK(st.stop == REWIND_STOP_END_OF_GENERATION);
    char fresh[kMaxText];
    OK(rewind_detokenize(g_model, out, n_out - 1, fresh, kMaxText, &n_text));
    CHECK(strcmp(fresh, replies[0][0]) == 0);
    rewind_cache_free(c);
    printf("constrained chat: '%s' then '%s'\n", replies[0][0], replies[0][1]);
}

int main(void) {
    OK(rewind_model_load(REWIND_SHARED_DIR "/models/pycode-4m-q8_0.gguf", &g_model));
    OK(rewind_context_new(g_model, NULL, &g_ctx));
    test_program_equals_plain();
    test_plain_generate_under_a_constraint();
    test_errors_change_nothing();
    test_constrained_chat();
    rewind_context_free(g_ctx);
    rewind_model_free(g_model);
    printf("ok\n");
    return 0;
}
