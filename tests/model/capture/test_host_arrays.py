"""Arrays whose memory comes from torch behave as the numpy arrays they stand in for."""

import gc

import numpy as np
import pytest

from transformer_viewer.model.capture import host_arrays


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64, np.bool_])
def test_empty_and_zeros_have_the_asked_shape_and_dtype(dtype):
    a = host_arrays.empty((3, 5, 7), dtype)
    z = host_arrays.zeros((4, 6), dtype)
    assert a.shape == (3, 5, 7) and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
    assert z.shape == (4, 6) and z.dtype == np.dtype(dtype)
    assert not z.any()


def test_the_memory_lives_as_long_as_the_array():
    a = host_arrays.zeros((256, 256), np.float32)
    a[:] = np.arange(256, dtype=np.float32)
    view = a[10:20]
    del a
    gc.collect()
    host_arrays.empty((256, 256), np.float32)[:] = -1  # would reuse freed memory
    np.testing.assert_array_equal(view, np.tile(np.arange(256, dtype=np.float32), (10, 1)))


MIB = 1 << 20


@pytest.fixture
def empty_pool():
    host_arrays.release_idle()
    yield
    host_arrays.release_idle()


def test_a_large_buffer_comes_back_once_every_array_over_it_is_gone(empty_pool):
    a = host_arrays.empty((2, MIB), np.float16)
    address = a.ctypes.data
    del a
    b = host_arrays.empty((4, MIB // 2), np.float16)  # the same bytes, another shape
    assert b.ctypes.data == address and b.shape == (4, MIB // 2) and b.dtype == np.float16
    c = host_arrays.empty((MIB,), np.float32)  # the same bytes again, while b lives: new memory
    assert c.ctypes.data != address


@pytest.mark.parametrize("keep", ["slice", "tensor", "memoryview"])
def test_a_buffer_stays_lent_while_anything_reads_its_memory(empty_pool, keep):
    import torch

    a = host_arrays.empty((4, MIB // 4), np.float32)
    a[:] = 7.0
    if keep == "slice":
        held = a[1:3]
    elif keep == "tensor":
        held = torch.from_numpy(a[2])
    else:
        held = memoryview(a)
    address = a.ctypes.data
    del a
    gc.collect()
    b = host_arrays.empty((4, MIB // 4), np.float32)
    b[:] = -1.0
    assert b.ctypes.data != address
    np.testing.assert_array_equal(np.asarray(held), 7.0)


def test_a_request_no_idle_buffer_fits_lets_the_idle_ones_go(empty_pool):
    a = host_arrays.empty((MIB,), np.float32)
    keep = host_arrays.empty((2 * MIB,), np.float32)
    del a
    assert host_arrays.pooled_bytes() == (8 * MIB, 4 * MIB)
    other = host_arrays.empty((3 * MIB,), np.float32)
    assert host_arrays.pooled_bytes() == (20 * MIB, 0)
    del keep, other


def test_small_and_huge_arrays_are_not_pooled(empty_pool):
    small = host_arrays.empty((16,), np.float32)
    huge = host_arrays.empty((257 * MIB,), np.uint8)  # never written: no memory is touched
    assert small.shape == (16,) and huge.nbytes == 257 * MIB
    assert host_arrays.pooled_bytes() == (0, 0)
