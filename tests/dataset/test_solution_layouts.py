"""Every layout FlashInfer-Bench 0.1.2 reads, read by every command through one loader.

The roots here are written with FlashInfer-Bench's own API (its models, `save_json_file`,
`TraceSet.add_workload_traces`), so they are what it writes, not what we think it writes:
its nested layout (definitions/<op_type>/, workloads/<op_type>/, solutions/<author>/<op_type>/
<definition>/<name>.json), and the flat one of its example root (definitions/<name>.json,
workloads/<name>.jsonl, solutions/<name>.json). Solutions are found in its layout and ours
(<name>/solution.json), under --solutions-root and the data root's solutions/; a name two files
hold is refused naming both. Everything runs on the CPU with the host runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashinfer_bench.data import (
    AxisConst,
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    TensorSpec,
    Trace,
    TraceSet,
    Workload,
    save_json_file,
    save_jsonl_file,
)
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.dataset.solutions import (
    FLASHINFER_BENCH,
    OURS,
    SolutionIndexError,
    index_solutions,
    solution_roots,
)
from envaudit.dataset.traceset import load_traceset
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution

DEFINITION = "fib_scale"
OP_TYPE = "elementwise"
UUIDS = ["00000000-0000-4000-8000-0000000000f1", "00000000-0000-4000-8000-0000000000f2"]
MAIN = "import torch\n\n\ndef run(x, scale):\n    return x * scale\n"


def fib_definition(explicit: bool = True) -> Definition:
    """With `explicit`, each axis's `type` is set, so FlashInfer-Bench's writer (which leaves
    out fields left at their defaults) writes it; without, it writes `{}` and `{"value": 8}`."""
    axes = {"B": AxisVar(type="var"), "D": AxisConst(type="const", value=8)}
    return Definition(
        name=DEFINITION,
        op_type=OP_TYPE,
        axes=axes if explicit else {"B": AxisVar(), "D": AxisConst(value=8)},
        inputs={
            "x": TensorSpec(shape=["B", "D"], dtype="float32"),
            "scale": TensorSpec(shape=None, dtype="float32"),
        },
        outputs={"out": TensorSpec(shape=["B", "D"], dtype="float32")},
        reference=MAIN,
    )


def fib_workloads(explicit: bool = True) -> list[Trace]:
    """As fib_definition: with `explicit`, each input's `type` is written."""
    inputs = {"x": RandomInput(type="random"), "scale": ScalarInput(type="scalar", value=1.5)}
    if not explicit:
        inputs = {"x": RandomInput(), "scale": ScalarInput(value=1.5)}
    return [
        Trace(definition=DEFINITION, workload=Workload(axes={"B": b}, inputs=inputs, uuid=u))
        for b, u in zip((2, 5), UUIDS, strict=True)
    ]


def fib_solution(name: str, author: str = "fib-tests") -> Solution:
    spec = BuildSpec(
        language="python",
        target_hardware=["cpu", "cuda"],
        entry_point="main.py::run",
        destination_passing_style=False,
    )
    return Solution(
        name=name,
        definition=DEFINITION,
        author=author,
        spec=spec,
        sources=[SourceFile(path="main.py", content=MAIN)],
    )


def nested_path(root: Path, solution: Solution) -> Path:
    """Where FlashInfer-Bench keeps a solution: solutions/<author>/<op_type>/<definition>/."""
    folder = root / "solutions" / solution.author / OP_TYPE / solution.definition
    return folder / f"{solution.name}.json"


def write_nested_root(root: Path, *solutions: Solution) -> Path:
    """FlashInfer-Bench's own layout, written by its own API."""
    save_json_file(fib_definition(), root / "definitions" / OP_TYPE / f"{DEFINITION}.json")
    traceset = TraceSet.from_path(str(root))
    traceset.add_workload_traces(fib_workloads())
    for solution in solutions:
        save_json_file(solution, nested_path(root, solution))
    return root


def write_flat_root(root: Path, *solutions: Solution) -> Path:
    """The layout of FlashInfer-Bench's example root: every file straight under its folder."""
    save_json_file(fib_definition(), root / "definitions" / f"{DEFINITION}.json")
    save_jsonl_file(fib_workloads(), root / "workloads" / f"{DEFINITION}.jsonl")
    for solution in solutions:
        save_json_file(solution, root / "solutions" / f"{solution.name}.json")
    return root


def write_ours(
    solutions_root: Path, name: str, definition: str = DEFINITION, **extra: object
) -> Path:
    """A solution in our layout (<name>/solution.json, the source beside it), with `extra`
    fields (env, baseline)."""
    folder = solutions_root / name
    folder.mkdir(parents=True)
    (folder / "main.py").write_text(MAIN)
    spec = {
        "language": "python",
        "target_hardware": ["cpu", "cuda"],
        "entry_point": "main.py::run",
        "destination_passing_style": False,
    }
    solution = {"name": name, "definition": definition, "author": "tests", "spec": spec}
    solution["sources"] = [{"path": "main.py"}]
    (folder / "solution.json").write_text(json.dumps({**solution, **extra}))
    return folder / "solution.json"


def invoke(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def run_argv(root: Path, name: str, out: Path, *extra: str) -> list[str]:
    argv = ["run", "--solution", name, "--runtime", "host", "--device", "cpu"]
    argv += ["--data-root", str(root), "--report", str(out / "r.jsonl"), "--timeout", "60"]
    return [*argv, "--reference-cache", str(out / "refcache"), *extra]


def lines_of(report: Path) -> list[dict]:
    return [json.loads(x) for x in report.read_text().splitlines()]


# ---------------------------------------------------------------- the index


def test_the_index_finds_both_layouts_by_name_and_definition(tmp_path: Path) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    ours = tmp_path / "solutions"
    write_ours(ours, "ours-python")
    write_ours(ours, "other", definition="toy_scale")
    (ours / "ours-python" / "table.json").write_text("[1, 2]")  # a source file's data

    index = index_solutions(solution_roots(ours, root))
    assert index.names() == ["fib-python", "other", "ours-python"]
    assert index.of_definition(DEFINITION) == ["fib-python", "ours-python"]
    fib = index.find("fib-python")
    assert fib is not None
    assert (fib.layout, fib.path) == (
        FLASHINFER_BENCH,
        nested_path(root, fib_solution("fib-python")),
    )
    mine = index.find("ours-python")
    assert mine is not None and mine.layout == OURS
    # FlashInfer-Bench's own loader finds the same solutions in its root
    assert TraceSet.from_path(str(root)).get_solution("fib-python") is not None


def test_a_root_named_twice_counts_each_file_once(tmp_path: Path) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    assert solution_roots(root / "solutions", root) == [root / "solutions"]
    index = index_solutions([root / "solutions", root / "solutions" / "fib-tests"])
    assert index.names() == ["fib-python"]


def test_a_name_in_both_layouts_names_both_files(tmp_path: Path) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("twice"))
    ours = write_ours(tmp_path / "solutions", "twice")
    index = index_solutions(solution_roots(tmp_path / "solutions", root))
    with pytest.raises(SolutionIndexError) as caught:
        index.find("twice")
    message = str(caught.value)
    assert str(ours) in message and str(nested_path(root, fib_solution("twice"))) in message
    assert OURS in message and FLASHINFER_BENCH in message


def test_a_file_whose_definition_cannot_be_read_stops_a_listing_by_definition(
    tmp_path: Path,
) -> None:
    """It may be one of the definition's: FlashInfer-Bench refuses such a root as well."""
    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    broken = root / "solutions" / "someone" / "broken.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"name": "broken", ')
    index = index_solutions([root / "solutions"])
    with pytest.raises(SolutionIndexError, match=r"broken\.json: cannot tell which definition"):
        index.of_definition(DEFINITION)
    found = index.find("broken")  # found by its file's name, so a run can say what is wrong
    assert found is not None and found.problem is not None and "malformed JSON" in found.problem


# ---------------------------------------------------------------- run and check-inputs


def test_run_finds_a_flashinfer_bench_solution_by_name_and_runs_it(tmp_path: Path) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    argv = run_argv(root, "fib-python", tmp_path / "out")
    code, output = invoke(*argv, "--solutions-root", str(root / "solutions"))
    assert code == 0, output
    lines = lines_of(tmp_path / "out" / "r.jsonl")
    assert [(x["solution"], x["status"]) for x in lines] == [("fib-python", "PASSED")] * 2
    assert {x["workload"]["uuid"] for x in lines} == set(UUIDS)


def test_run_looks_in_the_data_root_s_solutions_without_being_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    monkeypatch.chdir(tmp_path)  # the default --solutions-root (solutions/) is not there
    code, output = invoke(*run_argv(root, "fib-python", tmp_path / "out", "--validation-only"))
    assert code == 0, output
    assert len(lines_of(tmp_path / "out" / "r.jsonl")) == 2


def test_the_flat_layout_works_for_check_inputs_and_run(tmp_path: Path) -> None:
    root = write_flat_root(tmp_path / "flat", fib_solution("flat-python"))
    loaded = TraceSet.from_path(str(root))  # FlashInfer-Bench reads it: the layout is its own
    assert [len(loaded.workloads[DEFINITION]), len(loaded.solutions[DEFINITION])] == [2, 1]
    ours = load_traceset(root)
    assert ours.workload_files(DEFINITION, UUIDS) == [f"workloads/{DEFINITION}.jsonl"]

    code, output = invoke("check-inputs", "--data-root", str(root))
    assert code == 0, output
    code, output = invoke(*run_argv(root, "flat-python", tmp_path / "out", "--validation-only"))
    assert code == 0, output
    assert {x["status"] for x in lines_of(tmp_path / "out" / "r.jsonl")} == {"PASSED"}


def test_a_definition_written_with_flashinfer_bench_s_defaults_runs(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    save_json_file(fib_definition(explicit=False), root / "definitions" / f"{DEFINITION}.json")
    save_jsonl_file(fib_workloads(), root / "workloads" / f"{DEFINITION}.jsonl")
    save_json_file(fib_solution("flat-python"), root / "solutions" / "flat-python.json")
    assert '"B": {}' in (root / "definitions" / f"{DEFINITION}.json").read_text()
    assert invoke("check-inputs", "--data-root", str(root))[0] == 0
    code, output = invoke(*run_argv(root, "flat-python", tmp_path / "out", "--validation-only"))
    assert code == 0, output


def test_a_run_over_workloads_in_two_files_names_them(tmp_path: Path) -> None:
    """A run's worker reads one workload file: workloads of one selection in two are refused
    (exit 2) naming both, and one file's workloads still run."""
    root = write_flat_root(tmp_path / "flat", fib_solution("flat-python"))
    first, second = fib_workloads()
    save_jsonl_file([first], root / "workloads" / f"{DEFINITION}.jsonl")
    save_jsonl_file([second], root / "workloads" / "more" / "extra.jsonl")
    code, output = invoke(*run_argv(root, "flat-python", tmp_path / "out", "--validation-only"))
    assert code == 2, output
    assert f"workloads/{DEFINITION}.jsonl" in output and "workloads/more/extra.jsonl" in output
    argv = run_argv(root, "flat-python", tmp_path / "out", "--validation-only")
    code, output = invoke(*argv, "--workload", UUIDS[1])
    assert code == 0, output


def test_a_name_in_both_layouts_is_refused_naming_both_files(tmp_path: Path) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("twice"))
    ours = write_ours(tmp_path / "solutions", "twice")
    argv = run_argv(root, "twice", tmp_path / "out")
    code, output = invoke(*argv, "--solutions-root", str(tmp_path / "solutions"))
    assert code == 2, output
    flat = " ".join(output.split())  # the console may wrap long paths
    assert "in two files" in flat
    for path in (ours, nested_path(root, fib_solution("twice"))):
        assert str(path).replace("/", "") in flat.replace("/", "").replace(" ", ""), output
    assert not (tmp_path / "out" / "r.jsonl").exists()


def test_a_solution_our_model_refuses_is_found_and_its_field_named(tmp_path: Path) -> None:
    """FlashInfer-Bench takes any non-empty author; ours names folders of the report, so one
    with a separator is refused: for that file and field, exit 2."""
    odd = fib_solution("odd-author", author="team/agent")
    root = write_nested_root(tmp_path / "fib", odd)
    code, output = invoke(*run_argv(root, "odd-author", tmp_path / "out"))
    assert code == 2, output
    flat = "".join(output.split())
    assert "odd-author.json" in flat and "notavalidsolutionfile" in flat
    assert "author:" in flat and "'team/agent'" in flat


# ---------------------------------------------------------------- audit --definition


def test_audit_definition_runs_every_solution_of_it_in_both_layouts(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    write_nested_root(root, fib_solution("fib-python"))
    save_json_file(fib_solution("fib-flat"), root / "solutions" / "fib-flat.json")
    ours = tmp_path / "solutions"
    write_ours(ours, "ours-python")
    write_solution(ours, "correct")  # a toy_scale solution: not this definition's

    out = tmp_path / "audit"
    argv = ["audit", "--definition", DEFINITION, "--data-root", str(root), "--suite", "all"]
    argv += ["--solutions-root", str(ours), "--runtime", "host", "--device", "cpu"]
    code, output = invoke(*argv, "--out", str(out))
    assert code == 0, output
    lines = lines_of(out / "results.jsonl")
    ran = sorted({(x["solution"], x["status"]) for x in lines})
    assert ran == [(n, "PASSED") for n in ("fib-flat", "fib-python", "ours-python")]
    assert len(lines) == 3 * len(UUIDS)


def test_audit_definition_refuses_what_it_cannot_audit(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    write_nested_root(root, fib_solution("fib-python"))
    base = ["audit", "--data-root", str(root), "--runtime", "host", "--device", "cpu"]
    base += ["--solutions-root", str(tmp_path / "none"), "--out", str(tmp_path / "audit")]
    code, output = invoke(*base, "--definition", "nosuch")
    assert code == 2 and "not a definition" in output and "fib_scale" in output, output
    code, output = invoke(*base, "--definition", "toy_scale")
    assert code == 2 and "no solution of it" in output, output
    code, output = invoke(*base, "--definition", DEFINITION, "--solution", "fib-python")
    assert code == 2 and "do not go together" in output, output


def test_a_candidate_runs_beside_the_definition_s_solutions_of_both_layouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Those of --solutions-root are linked beside it (our folder, FlashInfer-Bench's file);
    those of the data root's solutions/ are found there."""
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path / "cache"))
    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    ours = tmp_path / "solutions"
    write_ours(ours, "ours-python", env="torch-cpu", baseline=True)  # the candidate's env
    save_json_file(fib_solution("theirs-here"), ours / "someone" / "theirs-here.json")
    candidate = tmp_path / "work" / "main.py"
    candidate.parent.mkdir()
    candidate.write_text(MAIN)

    out = tmp_path / "audit"
    argv = ["audit", "--candidate", str(candidate), "--definition", DEFINITION, "--device"]
    argv += ["cpu", "--data-root", str(root), "--solutions-root", str(ours), "--out"]
    code, output = invoke(*argv, str(out), "--suite", "all", "--runtime", "host")
    assert code == 0, output
    ran = {x["solution"] for x in lines_of(out / "results.jsonl")}
    assert {"fib-python", "ours-python", "theirs-here"} < ran
    assert any(n.startswith(f"{DEFINITION}-candidate-") for n in ran), ran


def test_the_report_reads_both_layouts_and_refuses_a_name_in_two(tmp_path: Path) -> None:
    from envaudit.report.build import ReportError, load_solutions

    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    folder = root / "solutions"
    write_ours(folder, "ours-python", env="torch-cpu", baseline=True)
    found = load_solutions(folder)
    assert sorted(found) == ["fib-python", "ours-python"]
    assert (found["fib-python"].author, found["fib-python"].env) == ("fib-tests", "")
    assert (found["ours-python"].env, found["ours-python"].baseline) == ("torch-cpu", True)
    write_ours(folder, "fib-python")
    with pytest.raises(ReportError, match="in two files") as caught:
        load_solutions(folder)
    assert caught.value.exit_code == 2 and "fib-python.json" in str(caught.value)


def test_the_report_reads_the_data_roots_solutions_too(tmp_path: Path) -> None:
    """merge --data-root ROOT (a FlashInfer-Bench root) describes its solutions/ beside
    --solutions-root's, as run and audit find them."""
    from envaudit.report.build import load_solutions

    root = write_nested_root(tmp_path / "fib", fib_solution("fib-python"))
    ours = tmp_path / "ours"
    write_ours(ours, "ours-python", env="torch-cpu")
    assert sorted(load_solutions(ours)) == ["ours-python"]
    assert sorted(load_solutions(ours, root)) == ["fib-python", "ours-python"]


def test_export_writes_both_layouts_and_flashinfer_bench_loads_them(tmp_path: Path) -> None:
    """export-solutions takes every solution run finds: ours (sources beside) and a
    FlashInfer-Bench file kept in the flat layout, both rewritten into FlashInfer-Bench's nested
    layout, which its own TraceSet then loads; a name in both layouts is refused, naming both."""
    root = write_flat_root(tmp_path / "fib", fib_solution("fib-python"))
    ours = tmp_path / "ours"
    write_ours(ours, "ours-python", env="torch-cpu")
    out = tmp_path / "out"
    argv = ["export-solutions", "--out", str(out), "--data-root", str(root)]
    code, output = invoke(*argv, "--solutions-root", str(ours))
    assert code == 0, output
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    assert written == [
        f"solutions/fib-tests/{OP_TYPE}/{DEFINITION}/fib-python.json",
        f"solutions/tests/{OP_TYPE}/{DEFINITION}/ours-python.json",
    ]
    save_json_file(fib_definition(), out / "definitions" / OP_TYPE / f"{DEFINITION}.json")
    loaded = TraceSet.from_path(str(out))
    assert {s.name for s in loaded.solutions[DEFINITION]} == {"fib-python", "ours-python"}

    write_ours(ours, "fib-python")
    again = ["export-solutions", "--out", str(tmp_path / "o2"), "--data-root", str(root)]
    code, output = invoke(*again, "--solutions-root", str(ours))
    assert code == 2 and "in two files" in output and "fib-python.json" in output
