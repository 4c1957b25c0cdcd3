"""A fused multiply-add for compiled code: ``fma(a, b, c)`` is ``a b + c`` rounded once
(LLVM's ``llvm.fma.f64``, in software where the CPU has no FMA instruction).

numba compiles ``a * b + c`` with two roundings (no fastmath, no contraction), while OpenBLAS's
products on x86-64 with FMA fuse them: a compiled loop that is to give numpy's product bit for
bit takes this where OpenBLAS fuses (its callers check once per process that it does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

__all__ = ["fma"]


@intrinsic
def _fma_intrinsic(
    typingctx: object, a: types.Type, b: types.Type, c: types.Type
) -> tuple[object, object]:
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context: object, builder: ir.IRBuilder, signature: object, args: object) -> object:
        f64 = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f64], ir.FunctionType(f64, [f64] * 3))
        return builder.call(fn, args)

    return sig, codegen


#: ``fma(a, b, c)``: ``a b + c`` rounded once.
fma = cast(Callable[[float, float, float], float], _fma_intrinsic)
