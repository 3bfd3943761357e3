"""Both names producers publish the DLPack C exchange API under: DLPack 1.3's
``__dlpack_c_exchange_api__`` (a capsule) and DLPack 1.2's ``__c_dlpack_exchange_api__`` (an
int holding the struct's address), which some producers still use."""

from __future__ import annotations

import ctypes

import pytest

from test_args import _exceptions  # noqa: F401 (autouse fixture: its exception classes)
from test_args import _call, exchange_type, kDLCUDA, make, memref, scalar


def older_exchange_type():
    """exchange_type()'s class, publishing the API under the DLPack 1.2 name only."""
    Ex, log = exchange_type()
    api = Ex._keep[1]
    body = {k: v for k, v in vars(Ex).items()
            if k not in ("__dlpack_c_exchange_api__", "__dict__", "__weakref__")}
    body["__c_dlpack_exchange_api__"] = ctypes.addressof(api)
    return type("OlderExTensor", (), body), log


def test_older_attribute_name_takes_the_exchange_route():
    Old, log = older_exchange_type()
    f, _ = make((memref("a"), memref("b"), scalar("s", "f32")))
    _call(f, Old(device=(kDLCUDA, 1)), Old(device=(kDLCUDA, 1)), 1.0)
    assert log["from_py"] == 2                 # __dlpack__ would have raised
    assert log["stream_asked"] == [(kDLCUDA, 1)]


def test_older_name_that_is_not_an_int_falls_back_to_the_protocol():
    Old, _ = older_exchange_type()
    Old.__c_dlpack_exchange_api__ = "not an address"
    f, _ = make((memref("a"), memref("b"), scalar("s", "f32")))
    with pytest.raises(Exception, match=r"__dlpack(_device)?__ called"):   # protocol route
        _call(f, Old(device=(kDLCUDA, 1)), Old(device=(kDLCUDA, 1)), 1.0)
