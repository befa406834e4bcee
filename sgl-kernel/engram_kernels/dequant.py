"""e4m3 x ue8m0 -> bf16, bit-exact with ``engram.fp8.dequantize_rows`` on every GPU.

The reference computes ``bf16(float32(e4m3) * 2**(e - 127))`` with one rounding. Here:

* the e4m3 byte becomes an fp32 by moving its exponent and mantissa bits into place
  (``(b & 0x7F) << 20``, sign to bit 31) and multiplying by ``2**120``, which re-biases
  the exponent (7 -> 127) and turns e4m3 subnormals into the right fp32 value;
* ``2**(e - 127)`` is built from its bits (``e << 23``; ``e = 0`` is the fp32 subnormal
  ``0x00400000``), so no exp2 approximation is involved;
* both products are exact in fp32 (at most 4 significant bits, smallest ``2**-136``),
  so only the fp32 -> bf16 step rounds. It is done on the bits (round to nearest even),
  which keeps bf16 subnormals on hardware whose conversion would flush them.

NOTE: fp32 multiplies keep subnormals on both backends: Triton emits non-ftz fp32
multiplies on NVIDIA and compiles AMD kernels in IEEE denormal mode unless
``allow_flush_denorm`` is set, which these kernels never do.
"""

from __future__ import annotations

import triton.language as tl

from engram_kernels._jit import kernel

# NOTE: the row format: one ue8m0 exponent byte per 32 e4m3 values (``engram.fp8``'s
# FP8_BLOCK; test_imports checks that they agree, since this package imports no engram).
FP8_BLOCK = 32
BF16_NAN = tl.constexpr(0x7FC0)  # the one NaN every placement returns


@kernel
def dequant_bf16_bits(w, e):
    """bf16 bit patterns (int16) of e4m3 bytes ``w`` scaled by exponent bytes ``e``.

    ``w`` and ``e`` are uint8 tensors that broadcast against each other (``e`` holds one
    byte per 32 values of ``w``). e4m3 NaN (0x7F, 0xFF) and ``e = 255`` give NaN.
    """
    wb = w.to(tl.uint32)
    eb = e.to(tl.uint32)
    bits = ((wb & 0x80) << 24) | ((wb & 0x7F) << 20)
    value = bits.to(tl.float32, bitcast=True) * 1.329227995784916e36  # 2**120, exact
    scale = tl.where(eb == 0, 0x00400000, eb << 23).to(tl.float32, bitcast=True)
    prod = (value * scale).to(tl.uint32, bitcast=True)
    rounded = (prod + 0x7FFF + ((prod >> 16) & 1)) >> 16
    nan = ((wb & 0x7F) == 0x7F) | (eb == 255)
    return tl.where(nan, BF16_NAN, rounded).to(tl.int16)
