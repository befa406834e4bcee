"""Compile every kernel for every GPU the project targets, without a GPU.

Run as ``TRITON_INTERPRET=0 python -m test.kernels.compile_targets`` (test_compile.py
does): Triton's compilers for NVIDIA (ptxas) and AMD (LLVM) ship with Triton, so the
kernels build here for sm_90/sm_100/sm_103 and gfx942/gfx950. Prints one JSON object:
per kernel variant and target, "ok" plus the facts test_compile checks, or the error.
"""

from __future__ import annotations

import json
import re
import sys

import engram_kernels
import triton
from engram_kernels import gather, staged
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGETS = {
    "sm_90": GPUTarget("cuda", 90, 32),  # H100, H200
    "sm_100": GPUTarget("cuda", 100, 32),  # B200
    "sm_103": GPUTarget("cuda", 103, 32),  # B300
    "gfx942": GPUTarget("hip", "gfx942", 64),  # MI300X
    "gfx950": GPUTarget("hip", "gfx950", 64),  # MI355X
}
_GATHER = dict(
    w_addr="i64", s_addr="i64", w_stride="i64", s_stride="i64", ids_ptr="*i64", n="i32",
    num_rows="i32", out_ptr="*i16", count_ptr="*i64",
)  # fmt: skip
_GATHER_CONST = dict(D=256, NB=8, NB_P2=8, ROWS=16, W_ALIGN=16, S_ALIGN=8, COUNT=True)
_FETCH = dict(
    w_addr="i64", s_addr="i64", w_stride="i64", s_stride="i64", keys_ptr="*i64", n="i32",
    num_rows="i32", stage_ptr="*u8", count_ptr="*i64",
)  # fmt: skip
_FETCH_CONST = dict(
    D=256, D_P2=256, NB=8, NB_P2=8, ROWS=staged.FETCH_ROWS, W_ALIGN=8, S_ALIGN=8, COUNT=True
)
_PLACE = dict(
    stage_ptr="*u8", keys_ptr="*i64", order_ptr="*i64", n="i32", num_rows="i32", steps="i32",
    out_ptr="*i16",
)  # fmt: skip
_PLACE_CONST = dict(D=256, NB=8, NB_P2=8, ROWS=staged.PLACE_ROWS)
# name -> (kernel, signature, constexprs, arguments Triton may take as 16-byte aligned):
# pointers, and the HBM gather's table address and row stride. The fetch kernel's table
# addresses and strides are never specialised (see staged.py).
VARIANTS = {
    "gather_bf16": (gather._gather_kernel, _GATHER, _GATHER_CONST, {"w_addr", "s_addr", "w_stride"}),
    "gather_bf16_packed_rows": (
        gather._gather_kernel, _GATHER, {**_GATHER_CONST, "W_ALIGN": 8}, {"w_addr"},
    ),
    "fetch_host_rows": (staged._fetch_kernel, _FETCH, {**_FETCH_CONST, "SORTED": False}, set()),
    "fetch_host_rows_sorted": (
        staged._fetch_kernel, _FETCH, {**_FETCH_CONST, "SORTED": True}, set(),
    ),
    "place_rows": (staged._place_kernel, _PLACE, {**_PLACE_CONST, "SORTED": False}, set()),
    "place_rows_sorted": (staged._place_kernel, _PLACE, {**_PLACE_CONST, "SORTED": True}, set()),
}  # fmt: skip


def facts(asm: dict[str, str]) -> dict[str, object]:
    """What the tests check in the generated code."""
    if "ptx" in asm:
        ptx = asm["ptx"]
        return {
            "ftz": ptx.count(".ftz"),
            "vector_loads": bool(re.search(r"ld\.global(\.\w+)*\.v[24]", ptx)),
            "loads_16b": len(re.findall(r"ld\.global(\.\w+)*\.v4\.b32", ptx)),
        }
    gcn = asm["amdgcn"]
    return {
        "denorm_mode_32": re.findall(r"\.amdhsa_float_denorm_mode_32 (\d)", gcn),
        "vector_loads": bool(re.search(r"(global|buffer)_load_dwordx[24]", gcn)),
        "loads_16b": len(re.findall(r"(global|buffer)_load_dwordx4", gcn)),
    }


def compile_variant(name: str, target: GPUTarget) -> dict[str, object]:
    fn, signature, constexprs, aligned = VARIANTS[name]
    names = list(fn.arg_names)
    attrs = {
        (names.index(arg),): [["tt.divisibility", 16]]
        for arg, ty in signature.items()
        if ty.startswith("*") or arg in aligned
    }
    full = {**signature, **{key: "constexpr" for key in constexprs}}
    try:
        compiled = triton.compile(ASTSource(fn, full, constexprs, attrs), target=target)
    except Exception as exc:  # noqa: BLE001 - reported, the test names it
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    return {"ok": True, **facts(compiled.asm)}


def main(argv: list[str]) -> None:
    if engram_kernels.INTERPRET:
        raise SystemExit("run with TRITON_INTERPRET=0: the interpreter compiles nothing")
    targets = argv or list(TARGETS)
    out = {name: {t: compile_variant(name, TARGETS[t]) for t in targets} for name in VARIANTS}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
