/*
 * test_util.h — check macros shared by the libwavert tests: a failed check prints the
 * expression, the location and the library's last error, then exits 1.
 */
#ifndef WAVERT_TEST_UTIL_H
#define WAVERT_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wavert.h"

/* Meson's exit code for a skipped test. */
#define TEST_SKIP 77

#define CHECK(condition)                                                                  \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n  last error: [%d] %s\n", __FILE__,       \
              __LINE__, #condition, (int)wavert_last_status(), wavert_last_error());      \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define CHECK_STATUS(expression, expected) CHECK((expression) == (expected))
#define CHECK_OK(expression) CHECK_STATUS(expression, WAVERT_OK)
/* The last error message contains `text`. */
#define CHECK_MESSAGE(text) CHECK(strstr(wavert_last_error(), (text)) != NULL)

#endif /* WAVERT_TEST_UTIL_H */
