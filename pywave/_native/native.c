/*
 * native.c — pywave._native as one translation unit (a unity build).
 *
 * The parts are separate files by concern (see native.h) but compiled together, so the
 * compiler inlines the per-call helpers across them exactly as it would in a single file:
 * the per-call cost does not depend on how the source is split. Only this file is compiled.
 */
#include "native.h"

#include "errors.c"
#include "scalars.c"
#include "streams.c"
#include "cupy.c"
#include "tensors.c"
#include "params.c"
#include "memref.c"
#include "results.c"
#include "objects.c"
#include "hostcode.c"
#include "hostfunction.c"
#include "launcher.c"
#include "module.c"
