"""The argument types of the SSD kernels' signatures (numba types; C-contiguous arrays).

Every kernel is compiled for exactly one signature, when its module is first imported
(or loaded from numba's on-disk cache): an argument of another type raises ``TypeError``
instead of compiling a new version on the request path. Arguments the kernels only read
are typed read-only, which also takes writable arrays (a read-only mapping of the table
file and a writable buffer pass the same kernel).
"""

from __future__ import annotations

from numba import types

INT = types.int64
FLAG = types.boolean


def _array(dtype: types.Type, ndim: int, *, readonly: bool = False) -> types.Array:
    return types.Array(dtype, ndim, "C", readonly=readonly)


I64 = _array(types.int64, 1)
I64_IN = _array(types.int64, 1, readonly=True)
I64_2 = _array(types.int64, 2)
I64_2_IN = _array(types.int64, 2, readonly=True)
U64 = _array(types.uint64, 1)
U64_IN = _array(types.uint64, 1, readonly=True)
U64_2 = _array(types.uint64, 2)
U8_IN = _array(types.uint8, 1, readonly=True)
ROWS = _array(types.uint8, 2)
ROWS_IN = _array(types.uint8, 2, readonly=True)
FLAGS = _array(types.boolean, 1)
FLAGS_IN = _array(types.boolean, 1, readonly=True)
