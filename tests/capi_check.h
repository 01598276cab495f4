/* The C tests' check macros (test_capi.c, test_capi_batch.c): a failed check names its file, line,
 * condition and rewind_last_error(), then exits 1, so ctest reports the first failure. */
#ifndef REWIND_TESTS_CAPI_CHECK_H
#define REWIND_TESTS_CAPI_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "rewind_c.h"

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
                    #cond, rewind_last_error());                                             \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define OK(call) CHECK((call) == REWIND_OK)

#endif
