"""GPU smoke test for a container: who am I, what can I write, which GPU, one timed matmul.

Runs as `python3 container_smoke.py` (e.g. from a read-only bind mount) or as
`python3 -c "$(cat container_smoke.py)"`. Prints one `key: value` line per fact; exit 1 when
CUDA is not usable. With ENVAUDIT_SRC set (a mounted copy of the repository's src/), it also
imports the envaudit package from there, to show that a mounted harness can run.
"""

import os
import sys
import time


def main() -> int:
    t0 = time.perf_counter()
    print(f"uid: {os.getuid()}:{os.getgid()} HOME={os.environ.get('HOME')}")
    for path in ("/", "/tmp"):
        probe = os.path.join(path, f".write-probe-{os.getpid()}")
        try:
            with open(probe, "w") as handle:
                handle.write("x")
            os.unlink(probe)
            print(f"writable {path}: yes")
        except OSError as exc:
            print(f"writable {path}: no ({exc.strerror})")
    src = os.environ.get("ENVAUDIT_SRC")
    if src:
        sys.path.insert(0, src)
        import envaudit

        print(f"envaudit: imported from {os.path.dirname(envaudit.__file__)}")
    import torch

    imported = time.perf_counter() - t0
    print(f"torch: {torch.__version__} cuda {torch.version.cuda} (import {imported:.2f} s)")
    if not torch.cuda.is_available():
        print("cuda: not available")
        return 1
    props = torch.cuda.get_device_properties(0)
    print(
        f"device: {props.name} sm_{props.major}{props.minor} {props.multi_processor_count} SMs "
        f"{props.total_memory / 2**30:.0f} GiB, visible {torch.cuda.device_count()}"
    )
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    first = time.perf_counter()
    c = a @ b
    torch.cuda.synchronize()
    first = time.perf_counter() - first
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 50
    start.record()
    for _ in range(reps):
        c = a @ b
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / reps
    ref = a[:64].float() @ b.float()
    err = (c[:64].float() - ref).abs().max().item()
    print(
        f"matmul: {n}^3 bf16 {ms:.3f} ms ({2 * n**3 / ms / 1e9:.0f} TFLOP/s), "
        f"first call {first * 1e3:.0f} ms, max abs err vs fp32 {err:.3f}"
    )
    print(f"total: {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
