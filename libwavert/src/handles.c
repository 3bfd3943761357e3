/*
 * handles.c — the registry of live handles that libwavert made (modules, kernel objects,
 * streams from wavert_stream_create, sparse tensor readers). Their release functions look the
 * handle up first, so a second release, or the release of something libwavert never returned,
 * is WAVERT_ERROR_INVALID_ARGUMENT instead of a use-after-free (the sparse reader's other
 * functions check too). An open-addressing hash set of
 * (address, kind) under one mutex: one lock and a probe or two per create and release, next to
 * the driver calls those make.
 */
#include <stdlib.h>

#include "internal.h"

#define EMPTY ((uintptr_t)0)
#define REMOVED ((uintptr_t)1)
#define MIN_CAPACITY 64

typedef struct entry {
  uintptr_t address; /* EMPTY, REMOVED or a live handle */
  int kind;
} entry;

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static entry *table;
static size_t capacity; /* a power of two, or 0 before the first handle */
static size_t used;     /* live + REMOVED slots */

static size_t slot_of(uintptr_t address, size_t mask) {
  return (size_t)(((uint64_t)address >> 4) * UINT64_C(0x9E3779B97F4A7C15) >> 20) & mask;
}

/* The slot holding (address, kind), or SIZE_MAX. Called with the mutex held. */
static size_t find(uintptr_t address, int kind) {
  if (capacity == 0) return SIZE_MAX;
  size_t mask = capacity - 1;
  for (size_t i = slot_of(address, mask), n = 0; n < capacity; i = (i + 1) & mask, ++n) {
    if (table[i].address == EMPTY) return SIZE_MAX;
    if (table[i].address == address && table[i].kind == kind) return i;
  }
  return SIZE_MAX;
}

/* Rehash the live entries into a table of `size` slots. Called with the mutex held. */
static int resize(size_t size) {
  entry *fresh = calloc(size, sizeof(*fresh));
  if (fresh == NULL) return 0;
  size_t live = 0;
  for (size_t i = 0; i < capacity; ++i) {
    if (table[i].address <= REMOVED) continue;
    size_t j = slot_of(table[i].address, size - 1);
    while (fresh[j].address != EMPTY) j = (j + 1) & (size - 1);
    fresh[j] = table[i];
    ++live;
  }
  free(table);
  table = fresh;
  capacity = size;
  used = live;
  return 1;
}

wavert_status wavert__handle_add(const void *handle, int kind) {
  uintptr_t address = (uintptr_t)handle;
  pthread_mutex_lock(&mutex);
  int ok = 1;
  if (2 * (used + 1) > capacity) {
    size_t live = 0;
    for (size_t i = 0; i < capacity; ++i) live += table[i].address > REMOVED;
    size_t size = capacity < MIN_CAPACITY ? MIN_CAPACITY : capacity;
    while (4 * (live + 1) > size && size <= SIZE_MAX / 4) size *= 2;  /* <= 1/4 full after */
    ok = resize(size);
  }
  if (ok) {
    size_t mask = capacity - 1, i = slot_of(address, mask);
    while (table[i].address > REMOVED) i = (i + 1) & mask;
    used += table[i].address == EMPTY;
    table[i].address = address;
    table[i].kind = kind;
  }
  pthread_mutex_unlock(&mutex);
  return ok ? WAVERT_OK : wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
}

int wavert__handle_drop(const void *handle, int kind, atomic_int *refcount) {
  pthread_mutex_lock(&mutex);
  size_t i = find((uintptr_t)handle, kind);
  int result = -1;
  if (i != SIZE_MAX) {
    result = refcount == NULL ||
             atomic_fetch_sub_explicit(refcount, 1, memory_order_acq_rel) == 1;
    if (result == 1) table[i].address = REMOVED;
  }
  pthread_mutex_unlock(&mutex);
  return result;
}

int wavert__handle_live(const void *handle, int kind) {
  pthread_mutex_lock(&mutex);
  int live = find((uintptr_t)handle, kind) != SIZE_MAX;
  pthread_mutex_unlock(&mutex);
  return live;
}
