"""The judge: the process that holds the expected answers, apart from the solution's.

A worker is two processes (docs/harness.md, "What a solution can reach"). The one the
supervisor started is the judge: it forks the solution's process before anything else has
happened (no secret read, no CUDA context, no reference), reads the job's seal and deletes it,
makes itself undumpable, and only then lets the solution's process go on. The judge never
imports the solution. It materialises each workload's inputs itself, computes or loads the
reference only when the solution's process hands it a call's outputs (already fixed: written
to a file, the call returned), compares, frees the reference and answers with the verdict. It
alone writes the job's progress, sealed (envaudit.schema.progress), and it builds each result
line from its own verdicts: a line the solution's process asks for can say PASSED only where
the judge has judged that workload's outputs and they passed.

Messages between the two are JSON lines on a pipe, bounded in size; nothing from the solution's
process is ever unpickled or evaluated. Standard library, torch and safetensors only.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import math
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors.torch import load_file, save_file

from envaudit.harness.compare import compare_outputs, overall_status, strict_diagnostic
from envaudit.harness.inputs import (
    InputError,
    ReferenceFault,
    axis_values,
    check_constraints,
    draw_checked,
    input_bytes,
    materialize_inputs,
    output_layouts,
    run_reference,
    scalable_inputs,
    torch_dtype,
)
from envaudit.harness.reference import ReferenceCache, cache_key
from envaudit.harness.solution import build_tools_missing, unsupported_device
from envaudit.harness.witness import (
    CHAINED_GRAPH,
    FIGURE_FIELDS,
    TIMING_MODES,
    ModeWitness,
    TimingWitness,
    fresh_input,
)
from envaudit.schema.expressions import evaluate as evaluate_expression
from envaudit.schema.expressions import expression_names

MESSAGE_LIMIT_BYTES = 64 << 20
"""The longest message either process reads from the other (a result line is a few KB)."""
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


class LinkClosed(Exception):
    """The other process closed its end of the link (it exited or died)."""


class Link:
    """One process's end of the two pipes between the judge and the solution's process."""

    def __init__(self, reading: int, writing: int) -> None:
        self._in: BinaryIO = os.fdopen(reading, "rb", buffering=1 << 16)
        self._out: BinaryIO = os.fdopen(writing, "wb", buffering=0)

    def send(self, kind: str, **fields: Any) -> None:
        data = json.dumps({"kind": kind, **fields}, allow_nan=True).encode() + b"\n"
        try:
            self._out.write(data)
        except (BrokenPipeError, OSError) as exc:
            raise LinkClosed(str(exc)) from None

    def receive(self) -> dict[str, Any]:
        raw = self._in.readline(MESSAGE_LIMIT_BYTES + 1)
        if not raw:
            raise LinkClosed("end of file")
        if len(raw) > MESSAGE_LIMIT_BYTES or not raw.endswith(b"\n"):
            raise LinkClosed(f"a message longer than {MESSAGE_LIMIT_BYTES} bytes")
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            raise LinkClosed("a message that is not JSON") from None
        if not isinstance(message, dict):
            raise LinkClosed("a message that is not a JSON object")
        return message


@dataclass
class Split:
    """What fork_solution_process returns: this side's link, and the other's pid (judge)."""

    link: Link
    solution_pid: int | None
    """The solution's process, in the judge; None in the solution's process itself."""

    @property
    def is_judge(self) -> bool:
        return self.solution_pid is not None


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent() -> None:
    """SIGKILL this process when the one that forked it ends (parent-death signal)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def fork_solution_process() -> Split:
    """Fork the solution's process. Call first thing in the worker: the child must inherit
    nothing the judge learns later. The child dies with the judge (parent-death signal); the
    worker has it wait for the judge's first message before it does anything."""
    to_child_r, to_child_w = os.pipe()
    to_judge_r, to_judge_w = os.pipe()
    judge = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(to_child_w)
        os.close(to_judge_r)
        die_with_parent()
        if os.getppid() != judge:  # the judge died before the signal was armed
            os._exit(1)
        return Split(Link(to_child_r, to_judge_w), None)
    os.close(to_child_r)
    os.close(to_judge_w)
    return Split(Link(to_judge_r, to_child_w), pid)


def adopt_orphans() -> None:
    """Make this process a child subreaper: any process started below it (by the solution's
    process or a reference, under the judge; by a killed worker, under a fork server) and left
    behind, a new session or not, becomes its child when its parent ends, so it can end it
    (`end_descendants`, forkserver.Children)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def end_descendants() -> None:
    """SIGKILL every process left under the judge, the orphans it adopted included, and reap
    them, round after round (a killed child's own children come to the judge next): nothing a
    job started outlives it, not a fork of a reference holding the judge's keys."""
    me = str(os.getpid())
    for _ in range(100):
        children = [pid for pid in _process_ids() if _parent_of(pid) == me]
        if not children:
            return
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)


def _process_ids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[1].decode()
    except (OSError, IndexError):
        return None


def seal_judge() -> None:
    """Make this process undumpable: a process of the same user without CAP_SYS_PTRACE can no
    longer read its memory (/proc/PID/mem, ptrace, process_vm_readv) nor its environment."""
    _prctl(PR_SET_DUMPABLE, 0)


def exit_like(status: int) -> None:
    """End this process the way the solution's process ended (its wait status), so the
    supervisor reads the same exit code or signal as from a single-process worker."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        faulthandler.disable()
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def write_outputs(path: Path, produced: list[Any]) -> list[dict[str, Any]]:
    """Write a call's outputs (the harness's own snapshot) for the judge; what each one is.
    Tensors go into one safetensors file, written to a temporary name and renamed."""
    tensors: dict[str, torch.Tensor] = {}
    described: list[dict[str, Any]] = []
    for index, value in enumerate(produced):
        if isinstance(value, torch.Tensor):
            key = f"out{index}"
            tensors[key] = value.detach().to("cpu").contiguous()
            described.append({"tensor": key})
        else:
            described.append({"other": type(value).__name__})
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
    return described


def _stand_in(type_name: str) -> Any:
    """An object whose type is called like the value the solution returned (not a tensor), so
    the comparison's message names it."""
    return type(str(type_name)[:64] or "object", (), {})()


def read_outputs(path: Path, described: list[Any], device: torch.device) -> list[Any]:
    """The outputs the solution's process wrote, on `device`. What the file holds is, by
    definition, the call's output: the judge reads it once and keeps its own copy."""
    stored = load_file(str(path)) if path.is_file() else {}
    outputs: list[Any] = []
    for entry in described[:256]:
        key = entry.get("tensor") if isinstance(entry, dict) else None
        if isinstance(key, str) and key in stored:
            outputs.append(stored[key].to(device))
        else:
            other = entry.get("other", "missing") if isinstance(entry, dict) else "missing"
            outputs.append(_stand_in(str(other)))
    return outputs


def scaled(
    definition: Mapping[str, Any],
    workload: Mapping[str, Any],
    inputs: dict[str, Any],
    factor: float,
) -> dict[str, Any]:
    """The scale probe's inputs: the scalable ones multiplied by `factor` (in place of the
    dict). Both processes build them the same way from the same draw."""
    for name in scalable_inputs(definition, workload):
        inputs[name] = (inputs[name].float() * factor).to(inputs[name].dtype)
    return inputs


@dataclass
class Judge:
    """The judge's state for one job: the workloads it may judge and its verdicts so far."""

    definition: Mapping[str, Any]
    workloads: Mapping[str, Mapping[str, Any]]
    root: Path
    device: torch.device
    cache: ReferenceCache
    strict: bool = False
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    witness: TimingWitness | None = None
    solution: Mapping[str, Any] = field(default_factory=dict)
    """The solution.json as the judge read it before the solution's process went on."""

    timed: bool = False
    """The job times its workloads: the judge will check timed calls, references no cache holds."""
    solution_pid: int | None = None
    """The solution's process, whose thread's waits for a CPU the timing witness reads."""
    warmed: bool = False

    def begin(self, uuid: str) -> None:
        """A workload begins in the solution's process (its GPU turn has come: the gate is
        behind it). The first time, the judge warms its own reference path while that process
        draws its inputs and makes its unjudged first call (warm_reference)."""
        self.verdicts[uuid] = {"scale": {}}
        if self.timed and not self.warmed:
            self.warmed = True
            self.warm_reference(uuid)

    def warm_reference(self, uuid: str) -> None:
        """Run the reference once on the job's smallest workload, its outputs thrown away, when
        this workload's reference will come from the cache: a timed call's check is the judge's
        first reference call otherwise, and pays, in its turn, for everything a process's first
        call loads (0.1-0.3 s a job on the H100: CUDA modules, library handles). A GPU's only:
        on the CPU it would take cores from the solution's process for little. Any fault is
        left for the validation to meet."""
        workload = self.workloads.get(uuid)
        if workload is None or self.cache.directory is None or self.device.type != "cuda":
            return
        key = cache_key(self.definition, workload, 0, self.device.type)
        if not self.cache.entry(key).exists():
            return  # the validation computes it, and warms the path itself
        smallest = min(self.workloads.values(), key=lambda w: input_bytes(self.definition, w))
        try:
            with contextlib.suppress(Exception):  # the validation meets any fault and names it
                self._reference(
                    smallest, draw_checked(self.definition, smallest, self.root, self.device, 0)
                )
        finally:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    def timing(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """One step of the timing handshake (envaudit.harness.witness): setup, begin (the
        judge's clock starts; a nonce for the fresh inputs), end (it stops; the judge reads the
        slots its sample picked), finish (the picked calls judged). Any malformed request ends
        the mode's record with an error, which flags its figure."""
        uuid, mode = str(request.get("uuid")), str(request.get("mode"))
        workload = self.workloads.get(uuid)
        if workload is None or mode not in TIMING_MODES:
            return _refused(f"timing of {uuid!r} in mode {mode!r}")
        if self.witness is None:
            self.witness = TimingWitness(self.device, self.solution_pid)
        step = request.get("timing")
        try:
            if step == "setup":
                fresh = fresh_input(self.definition, workload)
                outputs = output_layouts(self.definition, workload)
                dps = bool(self.solution.get("spec", {}).get("destination_passing_style", True))
                return self.witness.setup(uuid, request, fresh, outputs, dps)
            if step == "begin":
                return {"nonce": self.witness.begin(uuid, mode, int(request.get("first") or 0))}
            if step == "end":
                samples = request.get("samples_ms")
                if not isinstance(samples, list) or len(samples) > 100_000:
                    raise ValueError("the batch's samples are not a list of times")
                self.witness.end(uuid, mode, [float(v) for v in samples])
                return {}
            if step == "finish":
                defer = mode != CHAINED_GRAPH and request.get("defer") is True
                return self._finish_timing(uuid, mode, workload, defer)
        except (KeyError, TypeError, ValueError) as exc:
            record = self.witness.record(uuid, mode)
            if record is not None:
                record.error = f"timing handshake: {type(exc).__name__}: {exc}"[:500]
            return _refused(f"timing handshake: {type(exc).__name__}")
        return _refused(f"unknown timing step {step!r}")

    def _finish_timing(
        self, uuid: str, mode: str, workload: Mapping[str, Any], defer: bool
    ) -> dict[str, Any]:
        """A mode's measurement has ended: its picked calls are checked now or, where the
        solution's process says another mode follows (`defer`), with that mode's, on one draw of
        the workload's inputs; its account is summed up when the line is settled. Whatever is
        still unchecked then is checked then (settle), so a deferral the process never follows
        up changes nothing."""
        assert self.witness is not None
        result: dict[str, Any] = {"status": "PASSED", "message": "", "summary": None}
        self.verdicts.setdefault(uuid, {"scale": {}}).setdefault("timing", {})[mode] = result
        return dict(result) if defer else self._check_timed(uuid, workload)

    def _check_timed(self, uuid: str, workload: Mapping[str, Any]) -> dict[str, Any]:
        """Judge every picked timed call of the workload not judged yet, all of them on one draw
        of the workload's inputs (each check on its own copy: a reference may write its inputs);
        the first mode that fails is the answer, its message naming the mode."""
        assert self.witness is not None
        timing = self.verdicts.setdefault(uuid, {"scale": {}}).setdefault("timing", {})
        pending = [
            (mode, record)
            for mode in TIMING_MODES
            if (record := self.witness.record(uuid, mode)) is not None and not record.judged
        ]
        fresh = fresh_input(self.definition, workload)
        base: list[dict[str, Any]] = []
        answer: dict[str, Any] = {"status": "PASSED", "message": ""}
        try:
            for mode, record in pending:
                result = timing.setdefault(mode, {"status": "PASSED", "message": ""})
                try:
                    result.update(self._judge_picked(record, workload, fresh, base))
                except torch.cuda.OutOfMemoryError as exc:
                    record.error = f"out of memory judging the timed calls: {exc}"[:500]
                except InputError as exc:
                    result.update(status="WORKLOAD_ERROR", message=f"workload inputs: {exc}")
                record.release()
                if result["status"] != "PASSED" and answer["status"] == "PASSED":
                    message = f"a timed call ({mode}): {result['message']}"
                    answer = {"status": result["status"], "message": message}
        finally:
            base.clear()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return answer

    def _final_summaries(self, uuid: str) -> None:
        """Each mode's account (`summary`) as it stands when the line is settled, the only time
        it is read: batches the solution's process ran after the check count (and flag it)."""
        assert self.witness is not None
        timing = self.verdicts.get(uuid, {}).get("timing") or {}
        for mode, result in timing.items():
            record = self.witness.record(uuid, mode)
            if record is not None:
                result["summary"] = record.summary()
                result["figure"] = record.figure()

    def _achieved(self, workload: Mapping[str, Any], timing: Mapping[str, Any]) -> dict[str, Any]:
        """achieved_rates at the figures the judge keeps, over the workload's axes and, where
        the definition's formulas read inputs (a sum of sequence lengths), those inputs alone,
        drawn here on the CPU."""
        namespace: dict[str, Any] = dict(axis_values(self.definition, workload))
        formulas = [str(self.definition.get(k) or "") for k in ("flops", "bytes")]
        named = set().union(*(expression_names(f) for f in formulas if f)) - set(namespace)
        inputs = {k: v for k, v in self.definition.get("inputs", {}).items() if k in named}
        if inputs:
            try:
                drawn = materialize_inputs(
                    {**self.definition, "inputs": inputs}, workload, self.root
                )
            except Exception:  # the validation met the same inputs: nothing to add here
                return {}
            namespace = {**drawn, **namespace}
        try:
            return achieved_rates(self.definition, namespace, timing)
        except Exception:  # a formula the definition's check let through but cannot be read
            return {}

    def _reference(self, workload: Mapping[str, Any], inputs: Mapping[str, Any]) -> tuple[Any, ...]:
        """The definition's reference on inputs no cache holds (a scale probe's, a timed
        call's fresh ones), its outputs checked against the definition (ReferenceFault)."""
        with torch.no_grad():
            return run_reference(self.definition, inputs, axis_values(self.definition, workload))

    def _judge_picked(
        self,
        record: ModeWitness,
        workload: Mapping[str, Any],
        fresh: Any,
        base: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """Compute the reference for each timed call the judge read, on that call's inputs,
        and compare: the first that fails fails the workload. `base` holds the workload's
        inputs once drawn, shared by every check of the line."""
        dtypes = [torch_dtype(spec["dtype"]) for spec in self.definition["outputs"].values()]
        for item in record.picked:
            if item.outputs is None:
                continue
            if not base:
                base.append(draw_checked(self.definition, workload, self.root, self.device, 0))
            inputs = {k: v.clone() if torch.is_tensor(v) else v for k, v in base[0].items()}
            if fresh is not None:
                inputs[fresh.name] = item.fresh_value(fresh, self.device)
            try:
                refs = self._reference(workload, inputs)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as exc:
                return _reference_raised(exc)
            comparisons = compare_outputs(self.definition, item.outputs, refs, dtypes)
            status = overall_status(comparisons)
            del refs, inputs
            if status != "PASSED":
                failing = next(c for c in comparisons if c.status == status)
                where = f"batch {item.batch}, step {item.step}"
                return {
                    "status": status,
                    "message": f"{failing.output}: {failing.message} ({where})",
                }
        return {"status": "PASSED", "message": ""}

    def verdict(self, request: Mapping[str, Any], outputs_dir: Path) -> dict[str, Any]:
        """Judge one call's outputs: the request names the workload, the input draw, the scale
        factor (scale probe) and the file holding the outputs."""
        uuid = str(request.get("uuid"))
        workload = self.workloads.get(uuid)
        if workload is None:
            return _refused(f"workload {uuid!r} is not one of this job's")
        purpose = str(request.get("purpose"))
        if purpose not in ("validation", "recheck", "scale"):
            return _refused(f"unknown purpose {purpose!r}")
        draw = 1 if purpose == "recheck" else 0
        factor = float(request.get("factor") or 1.0) if purpose == "scale" else None
        name = Path(str(request.get("file", ""))).name
        began = time.perf_counter()
        try:
            result = self._judge(workload, draw, factor, outputs_dir / name, request)
        except torch.cuda.OutOfMemoryError as exc:
            msg = f"out of memory while the harness computed the reference: {exc}"
            result = {"status": "RUNTIME_ERROR", "message": msg, "out_of_memory": True}
        except InputError as exc:
            result = {"status": "WORKLOAD_ERROR", "message": f"workload inputs: {exc}"}
        except Exception as exc:  # outputs the solution's process wrote that cannot be read
            msg = f"the harness could not judge the outputs: {type(exc).__name__}: {exc}"
            result = {"status": "RUNTIME_ERROR", "message": msg[:4000]}
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        result["judge_s"] = time.perf_counter() - began
        record = self.verdicts.setdefault(uuid, {"scale": {}})
        if purpose == "scale":
            record["scale"][str(factor)] = result
        else:
            record[purpose] = result
        return result

    def _judge(
        self,
        workload: Mapping[str, Any],
        draw: int,
        factor: float | None,
        path: Path,
        request: Mapping[str, Any],
    ) -> dict[str, Any]:
        def draw_inputs() -> dict[str, Any]:
            return draw_checked(self.definition, workload, self.root, self.device, draw)

        hits = self.cache.hits
        inputs: dict[str, Any] = {}
        if factor is not None:
            inputs = scaled(self.definition, workload, draw_inputs(), factor)
            broken = check_constraints(self.definition, workload, inputs)
            if broken:
                return {"status": "SKIPPED", "message": f"constraint {broken[0]!r}"}
        described = request.get("outputs")
        outputs = read_outputs(path, described if isinstance(described, list) else [], self.device)
        with contextlib.suppress(OSError):
            path.unlink()
        try:
            if factor is None:
                refs = self.cache.outputs(self.definition, workload, draw_inputs, draw, self.device)
            else:
                refs = self._reference(workload, inputs)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:
            return _reference_raised(exc)
        dtypes = [torch_dtype(spec["dtype"]) for spec in self.definition["outputs"].values()]
        comparisons = compare_outputs(self.definition, outputs, refs, dtypes)
        status = overall_status(comparisons)
        failing = next((c for c in comparisons if c.status == status), None)
        result: dict[str, Any] = {
            "status": status,
            "message": f"{failing.output}: {failing.message}"
            if status != "PASSED" and failing
            else "",
            "comparisons": [c.as_dict() for c in comparisons],
            "reference_cached": self.cache.hits > hits,
        }
        if self.strict and factor is None:
            result["strict"] = strict_diagnostic(self.definition, outputs, refs, dtypes)
        del refs, outputs, inputs
        return result

    def settle(self, uuid: str, outcome: dict[str, Any], validation_only: bool) -> dict[str, Any]:
        """The outcome for the line, from the solution process's account and the judge's own
        verdicts: what the judge measured (correctness, re-check, strict diagnostic, scale
        probe) replaces what the account says, and PASSED stands only where the judge found
        the validation, and unless validation-only the re-check, PASSED."""
        record = self.verdicts.get(uuid, {"scale": {}})
        validation, recheck = record.get("validation"), record.get("recheck")
        for key, verdict in (("correctness", validation), ("recheck", recheck)):
            if verdict is not None and "comparisons" in verdict:
                outcome[key] = correctness(verdict["comparisons"])
            else:
                outcome.pop(key, None)
        outcome.pop("strict_diagnostic", None)
        if validation is not None and validation.get("strict") is not None:
            outcome["strict_diagnostic"] = validation["strict"]
        if validation is not None and "reference_cached" in validation:
            outcome["reference_cached"] = validation["reference_cached"]
        _settle_probe(outcome, {**record["scale"], "1.0": validation or {"status": "NONE"}})
        if self.witness is not None:
            self._check_timed(uuid, self.workloads[uuid])
            self._final_summaries(uuid)
            self.witness.forget(uuid)
        fresh = fresh_input(self.definition, self.workloads[uuid])
        _settle_timing(outcome, record.get("timing") or {}, fresh.name if fresh else None)
        if isinstance(outcome.get("timing"), dict):
            outcome["achieved"] = self._achieved(self.workloads[uuid], outcome["timing"])
        self._check_blame(uuid, outcome)
        if outcome.get("status") == "PASSED":
            needed = [("validation", validation)]
            if not validation_only:
                needed.append(("post-timing re-check", recheck))
            for what, verdict in needed:
                if verdict is None:
                    outcome.update(
                        status="RUNTIME_ERROR",
                        message=f"the harness never judged this workload's {what}"
                        " (the solution's process claimed a pass it was not given)",
                    )
                    break
                if verdict["status"] != "PASSED":
                    prefix = "post-timing re-check on fresh inputs: " if verdict is recheck else ""
                    outcome.update(status=verdict["status"], message=prefix + verdict["message"])
                    break
        return outcome

    def _check_blame(self, uuid: str, outcome: dict[str, Any]) -> None:
        """A status that blames the dataset (WORKLOAD_ERROR) or the device (UNSUPPORTED_DEVICE)
        stands only where the judge finds the same fault itself, in its own words: the solution's
        process runs the solution's code and would rather accuse anything but the solution."""
        status = outcome.get("status")
        if status == "WORKLOAD_ERROR":
            own = self._workload_fault(uuid)
        elif status == "UNSUPPORTED_DEVICE":
            spec = self.solution.get("spec") or {}
            own = unsupported_device(spec, self.device) or build_tools_missing(self.solution)
        else:
            return
        if own is not None:
            outcome["message"] = own
            return
        claimed = str(outcome.get("message") or "")[:300]
        message = (
            f"the solution's process reported {status} ({claimed!r}), which the judge did not"
            " find: the workload's inputs draw, the reference runs and the device and build"
            " tools are the ones the solution declares"
        )
        validation = self.verdicts.get(uuid, {}).get("validation")
        if isinstance(validation, Mapping) and validation.get("status") not in (None, "PASSED"):
            # what the judge did find is the line's status
            message += f"; the judge's own verdict: {validation.get('message')}"
            outcome.update(status=validation["status"], message=message)
        else:
            outcome.update(status="RUNTIME_ERROR", message=message)

    def _workload_fault(self, uuid: str) -> str | None:
        """The dataset's fault the judge itself met on this workload (a verdict of its own), or
        meets now drawing the inputs; None when it finds none."""
        record = self.verdicts.get(uuid, {})
        found = [record.get("validation"), record.get("recheck")]
        found += [*(record.get("scale") or {}).values(), *(record.get("timing") or {}).values()]
        for verdict in found:
            if isinstance(verdict, Mapping) and verdict.get("status") == "WORKLOAD_ERROR":
                return str(verdict.get("message"))
        workload = self.workloads.get(uuid)
        if workload is None:
            return None
        try:
            draw_checked(self.definition, workload, self.root, self.device, 0)
        except InputError as exc:
            return f"workload inputs: {exc}"
        except Exception:  # out of memory, say: not a fault the judge found in the dataset
            return None
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return None


def correctness(comparisons: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A line's `correctness` (or `recheck`) from one verdict's comparisons."""
    return {
        "max_absolute_error": max((float(c["max_abs"]) for c in comparisons), default=0.0),
        "max_relative_error": max((float(c["max_rel"]) for c in comparisons), default=0.0),
        "outputs": [dict(c) for c in comparisons],
    }


def probe_point(factor: float, comparisons: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One scale probe point from one verdict's comparisons."""
    return {
        "factor": factor,
        "status": overall_status_of(comparisons),
        "max_absolute_error": max((float(c["max_abs"]) for c in comparisons), default=0.0),
        "max_relative_error": max((float(c["max_rel"]) for c in comparisons), default=0.0),
        "outputs": [
            {k: c[k] for k in ("output", "status", "max_abs", "matched", "total")}
            for c in comparisons
        ],
    }


def overall_status_of(comparisons: list[Mapping[str, Any]]) -> str:
    """overall_status over comparisons as dicts."""
    for c in comparisons:
        if c["status"] != "PASSED":
            return str(c["status"])
    return "PASSED"


def _settle_probe(outcome: dict[str, Any], judged: Mapping[str, Mapping[str, Any]]) -> None:
    """Scale probe points the judge judged are its own; the others (a factor the solution's
    process says it failed on outright) stay as that process wrote them."""
    probe = outcome.get("scale_probe")
    if not isinstance(probe, dict) or not isinstance(probe.get("points"), list):
        return
    points = []
    for point in probe["points"]:
        factor = point.get("factor") if isinstance(point, dict) else None
        verdict = judged.get(str(float(factor))) if isinstance(factor, int | float) else None
        if verdict is not None and "comparisons" in verdict:
            points.append(probe_point(float(factor), verdict["comparisons"]))  # type: ignore[arg-type]
        elif verdict is not None and verdict.get("status") == "SKIPPED":
            points.append({"factor": factor, "skipped": verdict["message"]})
        else:
            points.append(point)
    probe["points"] = points


def _settle_timing(
    outcome: dict[str, Any], judged: Mapping[str, Mapping[str, Any]], fresh: str | None
) -> None:
    """Each timing mode's figure carries the judge's account of it (`judge`: its clock, the
    calls it checked); a mode the judge did not witness, or whose reported time does not fit
    the judge's clock, is named in `timing.flags`, which keeps the line out of every ranking.
    A timed call the judge found wrong fails the workload, as the validation would."""
    timing = outcome.get("timing")
    if not isinstance(timing, dict):
        return
    timing["fresh_input"] = fresh  # the judge's word (a chained graph's bound hangs on it)
    flags: list[str] = []
    for mode in TIMING_MODES:
        stats = timing.get(mode)
        if not isinstance(stats, dict):
            continue
        verdict = judged.get(mode)
        summary = verdict.get("summary") if verdict is not None else None
        stats["judge"] = summary
        figure = verdict.get("figure") if verdict is not None else None
        if isinstance(figure, dict):
            if not _same_figure(stats, figure):
                flags.append(
                    f"{mode}: the line's figure ({stats.get('median_ms')!r} ms over"
                    f" {stats.get('iterations')!r} steps) is not the one the judge was told"
                    f" ({figure['median_ms']!r} ms over {figure['iterations']})"
                )
            _keep_figure(stats, figure)
        if not isinstance(summary, dict):
            flags.append(f"{mode}: not measured under the judge's clock")
            continue
        flags += _account_flags(mode, summary)
        status = str(verdict.get("status")) if verdict is not None else "PASSED"
        if status != "PASSED" and outcome.get("status") == "PASSED":
            message = f"a timed call ({mode}): {verdict.get('message')}" if verdict else ""
            outcome.update(status=status, message=message)
    flags += _batching_flags(timing)
    if flags:
        timing["flags"] = flags
    else:
        timing.pop("flags", None)


def _account_flags(mode: str, summary: Mapping[str, Any]) -> list[str]:
    """What the judge's account of a mode says against its figure (at most one reason)."""
    if summary.get("error"):
        return [f"{mode}: {summary['error']}"]
    if summary.get("contended"):
        return [
            f"{mode}: the machine was busy: the solution's thread waited"
            f" {summary['waited_ms']:.3f} ms for a CPU within the judge's"
            f" {summary['window_ms']:.3f} ms over batches that reported"
            f" {summary['reported_ms']:.3f} ms (allowance {summary['allowance_ms']:.3f} ms);"
            " its time is not comparable"
        ]
    if not summary.get("consistent"):
        return [
            f"{mode}: the judge's clock read {summary['window_ms']:.3f} ms over the batches"
            f" that reported {summary['reported_ms']:.3f} ms (allowance"
            f" {summary['allowance_ms']:.3f} ms)"
        ]
    if not summary.get("checked_calls"):
        return [f"{mode}: no timed call was checked"]
    return []


BATCH_RATIO = 1.25
"""How far below the chained graph's calls (less the chain's own cost) a graph's may lie,
relatively, beside BATCH_MARGIN_MS (docs/harness.md, "Timing integrity", item 3). Set before
any GPU measured the bound, so loose on purpose: the chain's kernels between two calls may
evict what a call found in L2 in the plain graph (a weight it reads again), which the chain's
own cost, measured with no call beside it, does not hold; benchmarks/graph_batching.py
measures how far honest kernels lie from the bound, to tighten it."""
BATCH_MARGIN_MS = 0.003
"""And absolutely: what one replay's fixed cost, spread over its calls, and the node the chain
adds between two calls (about a microsecond a node on a Hopper graph) may honestly take off."""


def _batching_flags(timing: Mapping[str, Any]) -> list[str]:
    """A graph figure the chained graph does not bound: its calls cost less, each, than the
    same calls made one after another (each call's input keyed by the call before's outputs),
    less what the chain alone costs a call (the judge's own measurement) and a margin. A
    capture that batches its calls (no work for the first, one batched kernel for all at the
    last) is right wherever the judge looks and faster than its calls; this is what it costs.
    A graph figure the chained graph could not bound (it failed, or was not run where there is
    a fresh input to key) is flagged too: its figure is unbounded from below."""
    graph = timing.get("graph")
    if not isinstance(graph, dict) or timing.get("fresh_input") is None:
        return []
    chained = timing.get(CHAINED_GRAPH)
    summary = chained.get("judge") if isinstance(chained, dict) else None
    chain_ms = summary.get("chain_call_ms") if isinstance(summary, dict) else None
    if not isinstance(chained, dict) or not isinstance(chain_ms, int | float):
        why = timing.get("chained_graph_error") or "not measured"
        return [f"graph: no chained graph bounds its figure ({why})"]
    bound = (float(chained["median_ms"]) - chain_ms - BATCH_MARGIN_MS) / BATCH_RATIO
    if float(graph["median_ms"]) >= bound:
        return []
    return [
        f"graph: its calls read {graph['median_ms']:.6f} ms each, where one after another"
        f" they took {chained['median_ms']:.6f} ms less the chain's {chain_ms:.6f} ms: a"
        " capture that batches its calls"
    ]


def _same_figure(stats: Mapping[str, Any], figure: Mapping[str, Any]) -> bool:
    """Whether the solution's process wrote into its line the figure it told the judge: the
    same steps, the same median (the same arithmetic on the same numbers, so to the bit; a
    relative 1e-9 leaves room for nothing a process could gain by)."""
    median = stats.get("median_ms")
    return (
        stats.get("iterations") == figure["iterations"]
        and isinstance(median, int | float)
        and math.isclose(median, figure["median_ms"], rel_tol=1e-9, abs_tol=0.0)
    )


def _keep_figure(stats: dict[str, Any], figure: Mapping[str, Any]) -> None:
    """The judge's figure in the line, in place of the process's (ModeWitness.figure); the
    median's interval where the process's kind of measurement records one (GPU events)."""
    for name in FIGURE_FIELDS:
        stats[name] = figure[name]
    if stats.get("median_halfwidth") is not None:
        stats["median_halfwidth"] = figure["median_halfwidth"]


def achieved_rates(
    definition: Mapping[str, Any], namespace: Mapping[str, Any], timing: Mapping[str, Any]
) -> dict[str, Any]:
    """Achieved TFLOP/s and GB/s of each timing mode: the definition's formulas (over
    `namespace`: axes, and inputs where a formula reads them) over the mode's median."""
    achieved: dict[str, Any] = {}
    for mode in ("eager", "graph"):
        stats = timing.get(mode)
        if not isinstance(stats, dict):
            continue
        seconds = float(stats["median_ms"]) * 1e-3
        if definition.get("flops"):
            flops = float(evaluate_expression(definition["flops"], namespace))
            achieved[f"{mode}_tflops"] = flops / seconds / 1e12 if seconds > 0 else None
        if definition.get("bytes"):
            moved = float(evaluate_expression(definition["bytes"], namespace))
            achieved[f"{mode}_gbps"] = moved / seconds / 1e9 if seconds > 0 else None
    return achieved


def _reference_raised(exc: Exception) -> dict[str, Any]:
    """The dataset's fault: the definition's reference raised (or misbehaved: ReferenceFault)
    on inputs it accepts."""
    msg = str(exc) if isinstance(exc, ReferenceFault) else ""
    msg = msg or f"the definition's reference raised {type(exc).__name__}: {exc}"
    return {"status": "WORKLOAD_ERROR", "message": msg[:4000]}


def _refused(message: str) -> dict[str, Any]:
    return {"status": "RUNTIME_ERROR", "message": f"the harness refused to judge: {message}"}


class Submitter:
    """How the solution's process hands a call's outputs to a judge: written to a file in
    `outputs_dir`, then a request over `ask`. The in-process form (LocalJudge) exists for
    benchmarks and tests that judge without a second process."""

    def __init__(self, outputs_dir: Path) -> None:
        self.outputs_dir = outputs_dir
        self._count = 0

    def submit(
        self, uuid: str, purpose: str, factor: float | None, produced: list[Any]
    ) -> dict[str, Any]:
        self._count += 1
        name = f"outputs-{os.getpid()}-{self._count}.safetensors"
        described = write_outputs(self.outputs_dir / name, produced)
        request = {"uuid": uuid, "purpose": purpose, "factor": factor, "file": name}
        return self.ask({**request, "outputs": described})

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


class RemoteJudge(Submitter):
    """The judge in the parent process, over the link."""

    def __init__(self, outputs_dir: Path, link: Link) -> None:
        super().__init__(outputs_dir)
        self.link = link

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.link.send("judge", request=request)
        answer = self.link.receive()
        verdict = answer.get("verdict")
        if answer.get("kind") != "verdict" or not isinstance(verdict, dict):
            raise LinkClosed("the judge answered something else than a verdict")
        return verdict


class LocalJudge(Submitter):
    """A judge in this very process: no protection from the solution (benchmarks, tests)."""

    def __init__(self, outputs_dir: Path, judge: Judge) -> None:
        super().__init__(outputs_dir)
        self.judge = judge

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if "timing" in request:
            return self.judge.timing(request)
        return self.judge.verdict(request, self.outputs_dir)
