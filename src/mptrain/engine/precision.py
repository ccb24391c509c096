"""Mixed precision: forward passes in bfloat16 under ``torch.autocast``, everything else in
float32.

Why bfloat16 and not float16: it has float32's exponent range, so gradients neither
underflow nor overflow and no loss scaling is needed -- nothing changes in the steps the
strategies take after backward (gradient averaging, FedProx's and SCAFFOLD's corrections, DP
clipping all see ordinary float32 gradients), and ranks cannot disagree about skipping a
step the way float16's per-rank overflow checks can. Parameters, gradients, optimizer state
and everything that travels between workers stay float32: only the arithmetic of the
layers autocast lists (convolutions, linear layers, matrix products) runs in bfloat16.

It pays where the hardware computes bfloat16 natively (GPUs from Ampere on; CPUs with
AVX512-BF16 or AMX); elsewhere torch emulates it and a step is slower than in float32
(``benchmarks/README.md`` has the figures).

This module names the precisions and says what they mean for a machine, without torch (the
command line offers the names before torch is imported); ``engine.autocast`` runs them.
"""

from __future__ import annotations

from ..errors import setting_name as named   # as the caller spelled the setting

#: The --precision choices: float32 throughout, or bfloat16 autocast (``engine.autocast``).
PRECISIONS = ("32", "bf16")
FULL = PRECISIONS[0]   # "32": float32 throughout

#: /proc/cpuinfo flags of x86 CPUs that compute bfloat16 natively.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_computes_bf16(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU computes bfloat16 natively (True/False), None where it cannot be
    told (no /proc/cpuinfo, or no x86 flags line in it)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as info:
                cpuinfo = info.read()
        except OSError:
            return None
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                  if line.startswith("flags")), None)
    return None if flags is None else bool(NATIVE_BF16_FLAGS & set(flags))


def precision_warnings(precision: str, device: str, cpuinfo: str | None = None) -> list[str]:
    """What to tell a user whose bf16 run will be emulated (slower than float32)."""
    if precision == FULL or device != "cpu" or cpu_computes_bf16(cpuinfo) is not False:
        return []
    return [f"{named('precision')} bf16 on a CPU without AVX512-BF16 or AMX: torch emulates "
            f"bfloat16 and a step is several times slower than with {named('precision')} 32"]


def describe(precision: str) -> str:
    """The banner's words for ``precision``."""
    return "float32" if precision == FULL else \
        "bf16 autocast (parameters, gradients and optimizer state float32)"
