"""torch tensors changed in place between calls of one host function (the descriptor memo of
pywave._native remembers each parameter's last layout): every change is seen on the GPU.
tests/native/test_memo.py checks the same without a GPU on DLPack stand-ins."""

from __future__ import annotations

import pytest

import pywave

pytestmark = pytest.mark.gpu

STATIC4 = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @inc(%a: memref<4xf32>) kernel {
      %i = gpu.thread_id x
      %x = memref.load %a[%i] : memref<4xf32>
      %one = arith.constant 1.0 : f32
      %y = arith.addf %x, %one : f32
      memref.store %y, %a[%i] : memref<4xf32>
      gpu.return
    }
  }
  func.func @inc(%a: memref<4xf32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    gpu.launch_func @k::@inc blocks in (%c1, %c1, %c1) threads in (%c4, %c1, %c1)
        args(%a : memref<4xf32>)
    return
  }
}
"""


@pytest.fixture
def dev(torch_cuda):
    return torch_cuda.device("cuda", torch_cuda.cuda.current_device())


def test_resize_and_set_in_place_are_followed(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.ones(100, device=dev)
    b = torch.full((100,), 2.0, device=dev)
    c = torch.zeros(100, device=dev)
    mod(a, b, c)
    for t, value in ((a, 1.0), (b, 2.0), (c, 0.0)):   # resize_: same objects, new storage
        t.resize_(5000).fill_(value)
    mod(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, torch.full((5000,), 3.0, device=dev))
    other = torch.zeros(5000, device=dev)
    c.set_(other)                                     # another storage under the same object
    b.fill_(5.0)
    mod(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(other, torch.full((5000,), 6.0, device=dev))


def test_restride_and_rank_change_in_place_are_refused(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    a, b, c = (torch.ones(64, device=dev) for _ in range(3))
    mod(a, b, c)
    c.as_strided_((32,), (2,))                         # every other element: not compact
    with pytest.raises(pywave.ArgumentError, match=r"argument 'c' \(#2\).*layout mismatch"):
        mod(a, b, c)
    c.as_strided_((64,), (1,))
    mod(a, b, c)
    c.unsqueeze_(0)
    with pytest.raises(pywave.ArgumentError, match=r"argument 'c' \(#2\).*rank mismatch"):
        mod(a, b, c)


def test_static_size_and_dtype_changed_in_place_are_refused(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(STATIC4)
    a = torch.zeros(4, device=dev)
    mod.inc(a)
    a.resize_(5)
    with pytest.raises(pywave.ArgumentError, match=r"shape mismatch.*expected \[4\], got \[5\]"):
        mod.inc(a)
    a.resize_(4)
    a.data = torch.zeros(4, dtype=torch.int32, device=dev)   # the same object, now int32
    with pytest.raises(pywave.ArgumentError, match=r"dtype mismatch: expected float32"):
        mod.inc(a)
    a.data = torch.zeros(4, device=dev)
    mod.inc(a)
    mod.inc(a)
    torch.cuda.synchronize()
    assert torch.equal(a, torch.full((4,), 2.0, device=dev))
