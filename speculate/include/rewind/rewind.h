// The umbrella header: everything a decoding program needs (models and tokenizers, the KV cache,
// the forward pass, sampling, constraints, plain, speculative and batched generation, guess
// sources, sessions).
// Namespace rwd (C's stdio owns `rewind`); the speculative parts are in rwd::speculate.
#pragma once

#include "rewind/version.h"
#include "rewind/error.h"

#include "rewind/tokenizer.h"
#include "rewind/chat.h"
#include "rewind/model.h"
#include "rewind/kv_cache.h"
#include "rewind/context.h"
#include "rewind/sampler.h"
#include "rewind/constraint.h"
#include "rewind/generate.h"
#include "rewind/logprobs.h"
#include "rewind/session.h"
#include "rewind/chat_session.h"

#include "rewind/speculate/guess_source.h"
#include "rewind/speculate/ngram_source.h"
#include "rewind/speculate/reference_source.h"
#include "rewind/speculate/draft_source.h"
#include "rewind/speculate/composite_source.h"
#include "rewind/speculate/forced_source.h"
#include "rewind/speculate/suffix_source.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/speculative_session.h"
#include "rewind/speculate/batch_decoder.h"
