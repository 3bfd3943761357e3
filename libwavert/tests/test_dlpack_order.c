/*
 * wavert.h and a dlpack.h in one translation unit, in the order chosen by the build:
 * DLPACK_FIRST defined: `#include <dlpack.h>` then `#include "wavert.h"` (dlpack.h's
 * declarations are used); otherwise the reverse (wavert.h's are used, and the later dlpack.h
 * adds nothing). That it compiles is most of the test; it then converts a tensor built with
 * the DLPack types to a memref descriptor, to show both headers describe one ABI.
 */
#ifdef DLPACK_FIRST
#include <dlpack.h>
#include "wavert.h"
#else
#include "wavert.h"
#include <dlpack.h>
#endif

#include "test_util.h"

#ifdef DLPACK_FIRST
#define EXPECT_STAND_IN 1
#else
#define EXPECT_STAND_IN 0
#endif

int main(void) {
#ifdef DLPACK_TEST_STAND_IN
  const int stand_in = 1;
#else
  const int stand_in = 0;
#endif
  CHECK(stand_in == EXPECT_STAND_IN);
  CHECK(DLPACK_MAJOR_VERSION == 1);
  float data[6] = {0};
  int64_t shape[2] = {2, 3};
  DLManagedTensorVersioned managed = {
      .version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
      .flags = DLPACK_FLAG_BITMASK_READ_ONLY,
      .dl_tensor = {.data = data, .device = {kDLCUDA, 0}, .ndim = 2,
                    .dtype = {kDLFloat, 32, 1}, .shape = shape}};
  int64_t sizes[2] = {WAVERT_DYNAMIC, 3};
  wavert_memref_type type = {.dtype = {kDLFloat, 32, 1}, .rank = 2, .sizes = sizes};
  int64_t words[WAVERT_MEMREF_WORDS(2)];
  CHECK(wavert_memref_from_dltensor(&managed.dl_tensor, &type, words) == WAVERT_OK);
  CHECK(words[1] == (int64_t)(intptr_t)data && words[3] == 2 && words[4] == 3);
  CHECK(words[5] == 3 && words[6] == 1);
  return 0;
}
