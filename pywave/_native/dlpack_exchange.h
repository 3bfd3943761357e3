/*
 * dlpack_exchange.h — the DLPack C exchange API (DLPack 1.3), private to pywave._native.
 *
 * A producer type publishes `type(obj).__dlpack_c_exchange_api__`, a PyCapsule named
 * "dlpack_exchange_api" whose pointer is a `const DLPackExchangeAPI *` valid for the life of
 * the type. pywave reads two members: dltensor_from_py_object_no_sync (a borrowed DLTensor
 * view of a Python object, no stream synchronisation) and current_work_stream (the producer's
 * current stream of a device). Declared from the DLPack specification (version 1.3, "C
 * exchange API"); layout-compatible with it. libwavert never calls it, which is why it lives
 * here and not in wavert.h. The extension is built against wavert.h's DLPack declarations
 * only, never against a dlpack.h, so nothing here can clash.
 */
#ifndef PYWAVE_DLPACK_EXCHANGE_H
#define PYWAVE_DLPACK_EXCHANGE_H

#include "wavert.h" /* DLTensor, DLManagedTensorVersioned, DLDeviceType, DLPackVersion */

typedef int (*DLPackManagedTensorAllocator)(DLTensor *prototype, DLManagedTensorVersioned **out,
                                            void *error_ctx,
                                            void (*SetError)(void *error_ctx, const char *kind,
                                                             const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object,
                                                     DLManagedTensorVersioned **out);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor,
                                                   void **out_py_object);
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void **out_current_stream);

typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#endif /* PYWAVE_DLPACK_EXCHANGE_H */
