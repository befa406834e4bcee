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
from engram_kernels import dedup, gather
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
    num_rows="i32", out_ptr="*i16", src_ptr="*i64", keys_ptr="*i64", cap_mask="i64",
    count_ptr="*i64",
)  # fmt: skip
_GATHER_CONST = dict(D=256, NB=8, NB_P2=8, ROWS=16, W_ALIGN=16, S_ALIGN=8)
# name -> (kernel, signature, constexprs); pointers and strides are 16-byte aligned
# (as Triton specialises them at launch).
VARIANTS = {
    "gather_bf16_dedup": (
        gather._gather_kernel, _GATHER, {**_GATHER_CONST, "DEDUP": True, "COUNT": True},
    ),
    "gather_bf16_packed_rows": (
        gather._gather_kernel, _GATHER,
        {**_GATHER_CONST, "W_ALIGN": 8, "DEDUP": False, "COUNT": True},
    ),
    "expand": (
        dedup._expand_kernel, dict(out_ptr="*i16", src_ptr="*i64", n="i32"),
        {"ROW": 256, "ROW_P2": 256, "BLOCK": 32},
    ),
}  # fmt: skip
_ALIGNED = {"w_addr", "s_addr", "w_stride"}


def facts(asm: dict[str, str]) -> dict[str, object]:
    """What the tests check in the generated code."""
    if "ptx" in asm:
        ptx = asm["ptx"]
        return {"ftz": ptx.count(".ftz"), "vector_loads": bool(re.search(r"ld\.global\.v4", ptx))}
    gcn = asm["amdgcn"]
    return {
        "denorm_mode_32": re.findall(r"\.amdhsa_float_denorm_mode_32 (\d)", gcn),
        "vector_loads": "global_load_dwordx4" in gcn or "buffer_load_dwordx4" in gcn,
    }


def compile_variant(name: str, target: GPUTarget) -> dict[str, object]:
    fn, signature, constexprs = VARIANTS[name]
    names = list(fn.arg_names)
    attrs = {
        (names.index(arg),): [["tt.divisibility", 16]]
        for arg, ty in signature.items()
        if ty.startswith("*") or arg in _ALIGNED
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
