"""Materialise a workload's inputs and run a definition's reference.

Inputs come from three sources: scalars, safetensors blobs (hash-checked before use) and
`random` tensors drawn from a seed recorded in the workload, following the definition's
`init` rule for that input.

Random values come from a counter-based generator, drawn where the tensor will live (the GPU
under audit, or the CPU): element i of an input is a function of the input's seed and i alone,
splitmix64(seed + i * golden ratio), turned into the distribution by integer arithmetic
(uniform, randint, bernoulli) or by Box-Muller in float64 (normal), then rounded to float32 and
cast. Integer arithmetic is exact everywhere, so integer and uniform inputs are the same bits on
every device and torch build; a normal value can differ between devices only where float64
log/cos differ by an ulp next to a float32 rounding boundary (a few elements per billion in
float32, none expected in 16-bit types). No value depends on how the tensor is split into
chunks or on the device's size. The GPU draws a GiB-sized KV cache in well under a second,
where one CPU generator drew 0.5 GB/s and the chunked parallel CPU draw of revision 2, plus the
copy to the device, still took 1-2 s per input set.

On a CUDA device the same arithmetic runs as one fused elementwise kernel, compiled at the first
draw by torch's jiterator (NVRTC; kept in torch's kernel cache, which the job's JIT folder holds:
envaudit.runtime.jit) in place of the ~30 elementwise passes of the step-by-step draw over int64
and float64 temporaries, which made a 1.44 GB KV cache cost ~0.1 s per draw on an H200. The
kernel writes each step with explicitly rounded intrinsics (no contraction into fused
multiply-adds), so it gives the step-by-step draw's bits (tests/harness/test_inputs.py checks
every distribution and dtype on the GPU); where it cannot be compiled, the step-by-step draw
runs.
"""

from __future__ import annotations

import hashlib
import math
import os
import types
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from envaudit.schema.dtypes import canonical_dtype
from envaudit.schema.expressions import evaluate
from envaudit.schema.paths import PathOutsideRoot, path_inside, sha256_file

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}

DEFAULT_FLOAT_INIT: dict[str, Any] = {"dist": "normal", "mean": 0.0, "std": 1.0}
DRAW_CHUNK = 1 << 24
"""Elements drawn per step on a GPU (bounds the int64/float64 temporaries to a few hundred MB
while keeping the launches few)."""
CPU_DRAW_CHUNK = 1 << 20
"""Elements drawn per step on the CPU: temporaries of 8 MB stay near its caches. On this project's
2-core machines a 6144x4096 bfloat16 normal draw took 2.0 s before the in-place steps of
counter_hash and _draw (the same bits), and 0.62 s in steps of this size (0.61 s at 1 << 18, 0.67
s at 1 << 22); with another process busy on one core, 1.3-1.7 s (1 << 18: 2.0-2.5 s, every
step's parallel region waiting for a thread the other process holds off its core)."""
INPUT_DRAW = 3
"""The random draw's revision (3: counter-based, on the device), part of the reference cache's
key."""
_GOLDEN = 0x9E3779B97F4A7C15
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


class InputError(ValueError):
    """A workload's inputs cannot be materialised as its definition says."""


def torch_dtype(name: str) -> torch.dtype:
    try:
        return TORCH_DTYPES[canonical_dtype(name)]
    except KeyError:
        raise InputError(f"dtype {name} has no torch equivalent here") from None


def axis_values(definition: Mapping[str, Any], workload: Mapping[str, Any]) -> dict[str, int]:
    """Const axes from the definition plus the workload's var axes. An axis without a `type`
    is const when it has a `value`, else var (FlashInfer-Bench writes its defaults so; the
    schema's Axis reads them the same way)."""
    values: dict[str, int] = {}
    for name, axis in definition["axes"].items():
        kind = axis.get("type") or ("const" if "value" in axis else "var")
        if kind == "const":
            values[name] = int(axis["value"])
        elif name in workload["axes"]:
            values[name] = int(workload["axes"][name])
        else:
            raise InputError(f"workload {workload['uuid']}: var axis {name} has no value")
    return values


def concrete_shape(spec: Mapping[str, Any], axes: Mapping[str, int]) -> tuple[int, ...] | None:
    shape = spec.get("shape")
    if shape is None:
        return None
    return tuple(axes[a] for a in shape)


def input_seed(workload_seed: int, input_name: str) -> int:
    """One independent seed per input, so adding an input never shifts another's values."""
    digest = hashlib.sha256(f"{workload_seed}:{input_name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def default_int_init(dtype: torch.dtype) -> dict[str, Any]:
    """What FlashInfer-Bench draws for a random integer or boolean input without a rule (its
    definitions have no `init`): bool fair coin flips, int8 the whole range, uint8 [0, 256),
    other integers uniform in [-1024, 1024)."""
    if dtype == torch.bool:
        return {"dist": "bernoulli", "p": 0.5}
    if dtype == torch.int8:
        return {"dist": "randint", "low": -128, "high": 128}
    if dtype == torch.uint8:
        return {"dist": "randint", "low": 0, "high": 256}
    return {"dist": "randint", "low": -1024, "high": 1024}


def random_tensor(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    init: Mapping[str, Any] | None,
    seed: int,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Draw one tensor from `init` ({dist: normal|uniform|randint|bernoulli, ...}) on `device`,
    DRAW_CHUNK elements at a time (module docstring)."""
    if init is None:
        init = DEFAULT_FLOAT_INIT if dtype.is_floating_point else default_int_init(dtype)
    if init["dist"] not in ("normal", "uniform", "randint", "bernoulli"):
        raise InputError(f"unknown init dist {init['dist']!r}")
    out = torch.empty(shape, dtype=dtype, device=device)
    flat = out.view(-1)
    chunk = CPU_DRAW_CHUNK if out.device.type == "cpu" else DRAW_CHUNK
    fused = fused_draw_kernel() if out.device.type == "cuda" else None
    arguments = _fused_arguments(seed, init) if fused is not None else None
    for start in range(0, flat.numel(), chunk):
        piece = flat[start : start + chunk]
        if fused is not None and arguments is not None:
            try:
                piece.copy_(_fused_draw(fused, arguments, start, piece.numel(), out.device))
                continue
            except RuntimeError as exc:  # NVRTC missing or refusing: the step-by-step draw
                _give_up_fusing(exc)
                fused = None
        piece.copy_(_draw(counter_hash(seed, start, piece.numel(), out.device), init))
    return out


FUSED_DRAW_SOURCE = r"""
template <typename T>
T envaudit_draw(T index, long long seed, long long dist, long long low, long long span,
                double a, double b) {
  unsigned long long z = (unsigned long long)index * 0x9E3779B97F4A7C15ull
                         + (unsigned long long)seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  int high = (int)(unsigned int)(z >> 32);
  int lower = (int)(unsigned int)z;
  if (dist == 0) {
    double u1 = __dmul_rn(__dadd_rn((double)high, 2147483649.0), 2.3283064365386963e-10);
    double u2 = __dmul_rn(__dadd_rn((double)lower, 2147483648.0), 2.3283064365386963e-10);
    double radius = __dsqrt_rn(__dmul_rn(log(u1), -2.0));
    double value = __dmul_rn(radius, cos(__dmul_rn(u2, 6.283185307179586)));
    value = __dadd_rn(__dmul_rn(value, b), a);
    return (T)__double_as_longlong((double)__double2float_rn(value));
  }
  if (dist == 1) {
    unsigned long long drawn = span > 2147483648LL
        ? (z >> 1) % (unsigned long long)span
        : (unsigned long long)((long long)high + 2147483648LL) % (unsigned long long)span;
    return (T)(drawn + (unsigned long long)low);
  }
  float unit = __fmul_rn((float)((high >> 8) + (1 << 23)), 5.9604644775390625e-08f);
  if (dist == 2) {
    float value = __fadd_rn(__fmul_rn(unit, __double2float_rn(b)), __double2float_rn(a));
    return (T)__double_as_longlong((double)value);
  }
  return (T)(unit < __double2float_rn(a));
}
"""
"""The draw of one element, step for step as counter_hash and _draw write it: the index's
splitmix64 bits, then the distribution (0 normal, 1 randint, 2 uniform, 3 bernoulli). A float
result comes back as the bits of a float64 that holds the float32 value exactly, so the copy
into the input's dtype rounds it as the float32 tensor's copy would."""
_FUSED_DISTS = {"normal": 0, "randint": 1, "uniform": 2, "bernoulli": 3}
_fused_kernel: Callable[..., torch.Tensor] | None = None
FUSED_DRAW_ERROR: str | None = None
"""Why this process draws step by step on CUDA devices (None while the fused kernel works)."""


def fused_draw_kernel() -> Callable[..., torch.Tensor] | None:
    """The jiterator function of FUSED_DRAW_SOURCE, created once per process (it compiles at its
    first call); None when this torch has no jiterator or it failed before."""
    global _fused_kernel
    if _fused_kernel is None and FUSED_DRAW_ERROR is None:
        try:
            from torch.cuda.jiterator import _create_jit_fn

            _fused_kernel = _create_jit_fn(
                FUSED_DRAW_SOURCE, seed=0, dist=0, low=0, span=1, a=0.0, b=1.0
            )
        except (ImportError, AttributeError, RuntimeError) as exc:
            _give_up_fusing(exc)
    return _fused_kernel if FUSED_DRAW_ERROR is None else None


def _give_up_fusing(exc: BaseException) -> None:
    global FUSED_DRAW_ERROR
    FUSED_DRAW_ERROR = f"{type(exc).__name__}: {str(exc)[:500]}"


def _fused_arguments(seed: int, init: Mapping[str, Any]) -> dict[str, Any] | None:
    """The kernel's scalar arguments for `init` (their Python types fix the kernel's parameter
    types: int64 and float64); None where a value does not fit them, for the step-by-step draw."""
    dist = init["dist"]
    args: dict[str, Any] = {"seed": seed, "dist": _FUSED_DISTS[dist], "low": 0, "span": 1}
    if dist == "normal":
        args |= {"a": float(init.get("mean", 0.0)), "b": float(init.get("std", 1.0))}
    elif dist == "randint":
        low, span = int(init["low"]), int(init["high"]) - int(init["low"])
        if not (0 < span < 1 << 63 and -(1 << 63) <= low < 1 << 63):
            return None
        args |= {"low": low, "span": span, "a": 0.0, "b": 1.0}
    elif dist == "uniform":
        low_f, high_f = float(init["low"]), float(init["high"])
        args |= {"a": low_f, "b": high_f - low_f}
    else:
        args |= {"a": float(init.get("p", 0.5)), "b": 1.0}
    return args


def _fused_draw(
    kernel: Callable[..., torch.Tensor],
    arguments: Mapping[str, Any],
    start: int,
    n: int,
    device: torch.device,
) -> torch.Tensor:
    """Elements [start, start + n) of the draw: int64 for randint and bernoulli, float64 (each a
    float32 value) for the float distributions."""
    index = torch.arange(start, start + n, dtype=torch.int64, device=device)
    drawn = kernel(index, **arguments)
    return drawn.view(torch.float64) if arguments["dist"] in (0, 2) else drawn


def _as_int64(value: int) -> int:
    """A 64-bit pattern as torch's signed int64 holds it."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(bits: torch.Tensor, k: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's `>>` on int64 keeps the sign), into
    `out` when given."""
    shifted = torch.bitwise_right_shift(bits, k, out=out) if out is not None else bits >> k
    return shifted.bitwise_and_((1 << (64 - k)) - 1)


def counter_hash(seed: int, start: int, n: int, device: str | torch.device) -> torch.Tensor:
    """splitmix64(seed + i * golden) for i in [start, start + n), as int64 bit patterns.
    torch's int64 multiply and add wrap modulo 2**64 on every device, as splitmix64 needs."""
    bits = torch.arange(start, start + n, dtype=torch.int64, device=device)
    bits.mul_(_as_int64(_GOLDEN)).add_(_as_int64(seed))
    shifted = torch.empty_like(bits)  # one temporary, reused: fresh ones cost page faults
    for shift, multiplier in ((30, _MIX[0]), (27, _MIX[1]), (31, None)):
        bits.bitwise_xor_(_shift_right(bits, shift, shifted))
        if multiplier is not None:
            bits.mul_(_as_int64(multiplier))
    return bits


def _draw(bits: torch.Tensor, init: Mapping[str, Any]) -> torch.Tensor:
    """The distribution's values from 64 random bits per element. The two 32-bit halves are
    read as int32 through a view (no shifts: int64 shifts are slow on the CPU) and offset by
    2**31, which maps them one to one onto [0, 2**32)."""
    words = bits.view(torch.int32).view(-1, 2)
    high, low = words[:, 1], words[:, 0]  # little-endian, as every device torch runs on
    dist = init["dist"]
    if dist == "normal":  # in place, step for step as written out in tests/harness/test_inputs.py
        u1 = high.to(torch.float64).add_(2.0**31 + 1.0).mul_(2.0**-32)  # (0, 1]
        u2 = low.to(torch.float64).add_(2.0**31).mul_(2.0**-32)  # [0, 1)
        normal = u1.log_().mul_(-2.0).sqrt_().mul_(u2.mul_(2.0 * math.pi).cos_())
        std, mean = float(init.get("std", 1.0)), float(init.get("mean", 0.0))
        return normal.mul_(std).add_(mean).to(torch.float32)
    if dist == "randint":
        lo, span = int(init["low"]), int(init["high"]) - int(init["low"])
        if span > 1 << 31:
            return _shift_right(bits, 1).remainder_(span).add_(lo)
        return high.to(torch.int64).add_(1 << 31).remainder_(span).add_(lo)
    unit = ((high >> 8) + (1 << 23)).to(torch.float32).mul_(2.0**-24)  # [0, 1), as torch.rand
    if dist == "uniform":
        lo_f, hi_f = float(init["low"]), float(init["high"])
        return unit.mul_(hi_f - lo_f).add_(lo_f)
    return unit < float(init.get("p", 0.5))


# A worker hashes each blob once, however many workloads and re-checks read it.
file_sha256 = lru_cache(maxsize=256)(sha256_file)


def resolve_blob_path(root: Path, relative: str) -> Path:
    try:
        return path_inside(root, relative)
    except PathOutsideRoot as exc:
        raise InputError(str(exc)) from None


def load_blob_tensor(root: Path, spec: Mapping[str, Any]) -> torch.Tensor:
    path = resolve_blob_path(root, spec["path"])
    if not path.is_file():
        raise InputError(f"blob {spec['path']} is missing")
    expected = spec.get("sha256")
    if expected and file_sha256(path) != expected:
        raise InputError(
            f"blob {spec['path']}: sha256 {file_sha256(path)} does not match recorded {expected}"
        )
    with safe_open(str(path), framework="pt") as handle:
        if spec["tensor_key"] not in handle.keys():  # noqa: SIM118 - safe_open is not a dict
            raise InputError(f"blob {spec['path']} has no tensor {spec['tensor_key']}")
        tensor: torch.Tensor = handle.get_tensor(spec["tensor_key"])
        return tensor


def materialize_inputs(
    definition: Mapping[str, Any],
    workload: Mapping[str, Any],
    root: Path,
    device: str | torch.device = "cpu",
    seed_offset: int = 0,
) -> dict[str, Any]:
    """Build the keyword arguments of `run` for one workload, in definition order.

    `seed_offset` draws a fresh set of random inputs (used for the post-timing re-check).
    """
    axes = axis_values(definition, workload)
    seed = int(workload.get("seed", 0)) + seed_offset
    values: dict[str, Any] = {}
    for name, spec in definition["inputs"].items():
        source = workload["inputs"].get(name)
        if source is None:
            raise InputError(f"workload {workload['uuid']}: input {name} is not specified")
        kind = source["type"]
        if kind == "scalar":
            values[name] = source["value"]
            continue
        dtype = torch_dtype(spec["dtype"])
        shape = concrete_shape(spec, axes)
        if kind == "safetensors":
            tensor = load_blob_tensor(root, source)
        elif kind == "random":
            seeded = input_seed(seed, name)
            tensor = random_tensor(shape or (), dtype, spec.get("init"), seeded, device)
        else:
            raise InputError(f"workload {workload['uuid']}: input {name} has type {kind!r}")
        if shape is not None and tuple(tensor.shape) != shape:
            raise InputError(
                f"workload {workload['uuid']}: input {name} has shape {tuple(tensor.shape)},"
                f" definition says {shape}"
            )
        if tensor.dtype != dtype:
            raise InputError(
                f"workload {workload['uuid']}: input {name} has dtype {tensor.dtype},"
                f" definition says {spec['dtype']}"
            )
        values[name] = tensor.to(device)
    return values


def tensor_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes a contiguous tensor of this shape and dtype takes."""
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def output_layouts(
    definition: Mapping[str, Any], workload: Mapping[str, Any]
) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of each output of the workload, from the definition."""
    axes = axis_values(definition, workload)
    return [
        (tuple(concrete_shape(spec, axes) or ()), torch_dtype(spec["dtype"]))
        for spec in definition["outputs"].values()
    ]


def input_bytes(definition: Mapping[str, Any], workload: Mapping[str, Any]) -> int:
    """Bytes the workload's tensor inputs take, from the definition's shapes and dtypes; an
    InputError for an axis that is negative (no tensor has such a shape)."""
    axes = axis_values(definition, workload)
    for name, value in axes.items():
        if isinstance(value, int) and value < 0:
            raise InputError(f"workload {workload.get('uuid')}: axis {name} is {value}")
    total = 0
    for spec in definition["inputs"].values():
        shape = concrete_shape(spec, axes)
        if shape is not None:
            total += tensor_bytes(shape, torch_dtype(spec["dtype"]))
    return total


def device_memory_bytes(device: torch.device) -> int:
    """What one device holds: the GPU's memory, or this machine's."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def draw_checked(
    definition: Mapping[str, Any],
    workload: Mapping[str, Any],
    root: Path,
    device: torch.device,
    seed_offset: int,
) -> dict[str, Any]:
    """materialize_inputs, where whatever keeps the inputs from being drawn is an InputError
    (the dataset's fault, WORKLOAD_ERROR), never the solution's: a negative axis, inputs larger
    than the device's whole memory, any error while drawing but running out of GPU memory
    (which may be another job's, and is retried)."""
    needed = input_bytes(definition, workload)
    held = device_memory_bytes(torch.device(device))
    if needed > held:
        raise InputError(
            f"workload {workload.get('uuid')}: its inputs need {needed / 2**30:.1f} GiB,"
            f" more than the {held / 2**30:.1f} GiB of {device}"
        )
    try:
        return materialize_inputs(definition, workload, root, device, seed_offset)
    except (InputError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as exc:
        raise InputError(f"workload {workload.get('uuid')}: {type(exc).__name__}: {exc}") from exc


def scalable_inputs(definition: Mapping[str, Any], workload: Mapping[str, Any]) -> list[str]:
    """Inputs a scale probe may multiply by a factor without changing what they mean: the
    definition's `scale_probe_inputs` when it declares them, else random floating-point inputs
    drawn from a zero-mean normal (the default draw); either way only inputs this workload draws
    at random. Bounded draws (uniform gates, probabilities), integers, masks and captured blobs
    keep their values."""
    declared = definition.get("scale_probe_inputs")
    names = []
    for name, spec in definition["inputs"].items():
        source = workload["inputs"].get(name) or {}
        if source.get("type") != "random" or not torch_dtype(spec["dtype"]).is_floating_point:
            continue
        init = spec.get("init") or DEFAULT_FLOAT_INIT
        zero_mean_normal = init.get("dist") == "normal" and float(init.get("mean", 0.0)) == 0.0
        if (name in declared) if declared is not None else zero_mean_normal:
            names.append(name)
    return names


def check_constraints(
    definition: Mapping[str, Any], workload: Mapping[str, Any], inputs: Mapping[str, Any]
) -> list[str]:
    """Constraints that evaluate false over the materialised inputs (empty when all hold)."""
    namespace = {**axis_values(definition, workload), **inputs}
    return [c for c in definition.get("constraints") or [] if not bool(evaluate(c, namespace))]


def load_reference(definition: Mapping[str, Any]) -> Callable[..., Any]:
    """Compile the definition's reference source into a fresh module and return its `run`."""
    module = types.ModuleType(f"envaudit_reference_{definition['name']}")
    code = compile(definition["reference"], f"<reference {definition['name']}>", "exec")
    exec(code, module.__dict__)
    run: Callable[..., Any] = module.__dict__["run"]
    return run


class ReferenceFault(Exception):
    """The definition's reference misbehaved on inputs it accepts: it tried to end the process,
    or returned outputs that contradict the definition (a shape, an output that is all NaN).
    The dataset's fault, recorded as WORKLOAD_ERROR, never the solution's."""


def run_reference(
    definition: Mapping[str, Any],
    inputs: Mapping[str, Any],
    axes: Mapping[str, int] | None = None,
) -> tuple[Any, ...]:
    """Call the reference and return its outputs as a tuple in the definition's output order.
    It runs in the judge's process, so an exit it attempts (sys.exit, os._exit) is turned into
    a ReferenceFault rather than ending the judge; with `axes`, each output's shape is checked
    against the definition's."""
    real_exit = os._exit

    def refuse_exit(status: int) -> None:
        raise ReferenceFault(f"the definition's reference called os._exit({status})")

    os._exit = refuse_exit  # type: ignore[assignment]
    try:
        result = load_reference(definition)(**inputs)
    except SystemExit as exc:
        raise ReferenceFault(f"the definition's reference called sys.exit({exc.code!r})") from None
    finally:
        os._exit = real_exit
    outputs = result if isinstance(result, tuple) else (result,)
    if len(outputs) != len(definition["outputs"]):
        raise ReferenceFault(
            f"the definition's reference returned {len(outputs)} outputs, the definition"
            f" lists {len(definition['outputs'])}"
        )
    for (name, spec), out in zip(definition["outputs"].items(), outputs, strict=True):
        _check_reference_output(name, spec, out, axes)
    return tuple(outputs)


def _check_reference_output(
    name: str, spec: Mapping[str, Any], out: Any, axes: Mapping[str, int] | None
) -> None:
    if not isinstance(out, torch.Tensor):
        return
    shape = concrete_shape(spec, axes) if axes is not None else None
    if shape is not None and tuple(out.shape) != shape:
        raise ReferenceFault(
            f"the definition's reference returned output {name} of shape {tuple(out.shape)};"
            f" the definition declares {shape}"
        )
    if out.dtype.is_floating_point and out.numel() and not bool(torch.isfinite(out).any()):
        raise ReferenceFault(
            f"the definition's reference returned output {name} with no finite element"
            " (all NaN or infinite): no answer can be checked against it"
        )
