// A minimal check macro for the host unit tests: counts failures, prints the condition and a message, and returns
// from the calling void function. Plain checks (not assert) so that -DNDEBUG cannot disable them.
#pragma once

#include <cstdio>

inline int g_failures = 0;

#define EXPECT(cond, ...)                                       \
  do {                                                          \
    if (!(cond)) {                                              \
      ++g_failures;                                             \
      std::fprintf(stderr, "%s:%d: %s failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fprintf(stderr, "\n");                               \
      return;                                                   \
    }                                                           \
  } while (0)
