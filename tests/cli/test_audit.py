"""`envaudit audit` on the host runtime over a toy root: UNSUPPORTED_DEVICE is not a failure,
a wrong result is, and --resume skips what is already in the results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.runtime.registry import make_runtime
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution


def audit(root: Path, solutions: Path, out: Path, *names: str, resume: bool = False) -> tuple:
    argv = ["audit", "--runtime", "host", "--device", "cpu", "--data-root", str(root)]
    argv += ["--out", str(out)]
    argv += ["--solutions-root", str(solutions)]
    for name in names:
        argv += ["--solution", name]
    if resume:
        argv.append("--resume")
    result = CliRunner().invoke(app, argv)
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return result.exit_code, result.output, lines


def test_audit_counts_and_exit_codes(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    for name in ("correct", "gpu_only", "returns_nan"):
        write_solution(solutions, name)
    code, out, lines = audit(root, solutions, tmp_path / "a", "correct", "gpu_only")
    assert code == 0, out
    assert "1 PASSED, 1 UNSUPPORTED_DEVICE" in out  # smoke suite: one toy workload
    code, out, lines = audit(root, solutions, tmp_path / "a", "returns_nan")
    assert code == 1
    assert {line["status"] for line in lines} == {
        "PASSED",
        "UNSUPPORTED_DEVICE",
        "INCORRECT_NUMERICAL",
    }
    code, out, again = audit(root, solutions, tmp_path / "a", "correct", resume=True)
    assert len(again) == len(lines), "--resume ran a workload that already had a line"


def test_two_lines_of_one_key_resume_and_merge_keep_the_same_one(tmp_path: Path) -> None:
    """A report holding two lines of one key (solution, workload, env, closure hash, device), say
    from two runs into one file: --resume runs nothing more for it, and the audit's counts and
    `merge` keep the same line, the newest by timestamp, the later one in the file on a tie."""
    from envaudit.report.merge import merge_files

    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    code, out, lines = audit(root, solutions, tmp_path / "a", "correct")
    assert code == 0 and [line["status"] for line in lines] == ["PASSED"], out
    first = lines[0]
    report = tmp_path / "a" / "results.jsonl"
    # (timestamp of the second line, which line wins)
    cases = [("2000-01-01T00:00:00+00:00", "first"), ("2999-01-01T00:00:00+00:00", "second")]
    cases.append((first["timestamp"], "second"))  # a tie: the later line in the file
    for stamp, winner in cases:
        second = {**first, "status": "INCORRECT_NUMERICAL", "timestamp": stamp}
        report.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
        kept = (first if winner == "first" else second)["status"]
        code, out, again = audit(root, solutions, tmp_path / "a", "correct", resume=True)
        assert len(again) == 2, "--resume ran a workload that already had lines"
        assert f"1 result lines in {report}: 1 {kept}" in out, (stamp, out)
        assert code == (0 if kept == "PASSED" else 1), (stamp, out)
        merged = merge_files([report])
        assert [line.status for line in merged.lines] == [kept], stamp


def test_run_resume_that_skips_failed_lines_still_fails(tmp_path: Path) -> None:
    """`run --resume` with every workload already in the report judges the lines it kept."""
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    write_solution(solutions, "returns_nan")
    argv = ["run", "--solution", "returns_nan", "--runtime", "host", "--device", "cpu"]
    argv += ["--data-root", str(root), "--solutions-root", str(solutions)]
    argv += ["--report", str(tmp_path / "r.jsonl")]
    assert CliRunner().invoke(app, argv).exit_code == 1
    again = CliRunner().invoke(app, [*argv, "--resume"])
    assert "skipped" in again.output
    assert again.exit_code == 1, again.output


def test_jobs_at_once_give_the_lines_of_one_at_a_time(tmp_path: Path) -> None:
    """--cpu-jobs 3: the same lines (solution, workload, status, errors) as one job at a time,
    each intact in the one results file the parallel jobs append to."""
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    names = ("correct", "correct_dps", "returns_nan", "mutates_input", "gpu_only")
    for name in names:
        write_solution(solutions, name)

    def figures(lines: list[dict]) -> list[tuple]:
        return sorted(
            (x["solution"], x["workload"]["uuid"], x["status"], json.dumps(x.get("correctness")))
            for x in lines
        )

    _, _, serial = audit(root, solutions, tmp_path / "one", *names)
    argv = ["audit", "--runtime", "host", "--device", "cpu", "--data-root", str(root)]
    argv += ["--out", str(tmp_path / "three"), "--solutions-root", str(solutions)]
    argv += ["--cpu-jobs", "3", *(x for name in names for x in ("--solution", name))]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output  # returns_nan, mutates_input
    parallel = [json.loads(x) for x in (tmp_path / "three/results.jsonl").read_text().splitlines()]
    assert len(serial) == len(names) and figures(parallel) == figures(serial)


def test_the_longest_jobs_go_first(tmp_path: Path) -> None:
    """By the wall time of a previous audit into the same folder, else by workload count."""
    from envaudit.runtime.scheduling.audit import AuditPlan, longest_first

    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    for name in ("correct", "correct_dps", "returns_nan"):
        write_solution(solutions, name)
    plan = AuditPlan(
        solutions=[],
        devices=[(None, "cpu")],
        out=tmp_path / "a",
        runtime="host",
        data_root=root,
        solutions_root=solutions,
        suite="smoke",
    )
    report = tmp_path / "a" / "results.jsonl"
    names = ["correct", "correct_dps", "returns_nan"]
    assert longest_first(plan, names, report) == names  # one workload each: by name
    _, _, lines = audit(root, solutions, tmp_path / "a", *names)
    spent = {"correct": 0.5, "correct_dps": 3.0, "returns_nan": 1.5}
    for line in lines:
        line["wall_s"] = spent[line["solution"]]
    report.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert longest_first(plan, names, report) == ["correct_dps", "returns_nan", "correct"]


def test_jobs_that_need_the_compiler_go_where_their_start_costs_least(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the forked runtimes a solution naming torch.compile waits for the fork server's
    preload, so it runs after the others; on a container runtime its worker imports the
    compiler itself while staged, so it runs right after the first job, and keeps its place
    when nothing is staged."""
    from envaudit.runtime.scheduling.audit import (
        STAGE_SWITCH,
        AuditPlan,
        place_compiler_jobs,
        stage_ahead,
    )

    solutions = tmp_path / "solutions"
    compiles = (
        "fast = torch.compile(scaled)\n"
        "def run(x, lengths, scale):\n    return fast(x, lengths, scale)"
    )
    plain = "def run(x, lengths, scale):\n    return scaled(x, lengths, scale)"
    sources = {
        "a_compiles": (compiles, False),
        "b_plain": (plain, False),
        "c_plain": (plain, False),
        "d_compiles": (compiles, False),
    }
    for name in sources:
        write_solution(solutions, name, sources)
    names = ["a_compiles", "b_plain", "c_plain", "d_compiles"]
    for runtime, depth, expected in (
        ("host", "", ["b_plain", "c_plain", "a_compiles", "d_compiles"]),
        ("local", "", ["b_plain", "c_plain", "a_compiles", "d_compiles"]),
        ("docker", "", ["b_plain", "a_compiles", "d_compiles", "c_plain"]),
        ("docker", "1", ["b_plain", "a_compiles", "d_compiles", "c_plain"]),
        ("docker", "0", names),
    ):
        monkeypatch.setenv(STAGE_SWITCH, depth)
        plan = AuditPlan(
            solutions=names,
            devices=[(None, "cpu")],
            out=tmp_path / "a",
            runtime=runtime,
            solutions_root=solutions,
        )
        assert place_compiler_jobs(plan, names, stage_ahead(make_runtime(runtime))) == expected, (
            runtime,
            depth,
        )
    only = ["a_compiles", "d_compiles"]
    monkeypatch.setenv(STAGE_SWITCH, "")
    assert place_compiler_jobs(plan, only, stage_ahead(make_runtime("docker"))) == only


def test_an_audit_of_a_solution_that_imports_a_library_first_stages_two_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Such a worker takes seconds to reach its gate (FA4's CuTe DSL), so an audit stages at
    least two jobs ahead; ENVAUDIT_STAGE_NEXT still decides when set, and a runtime that
    stages more keeps its depth."""
    from envaudit.runtime.scheduling.audit import STAGE_SWITCH, stage_ahead

    monkeypatch.setenv(STAGE_SWITCH, "")
    assert (
        stage_ahead(make_runtime("host")),
        stage_ahead(make_runtime("host"), libraries_first=True),
    ) == (1, 2)
    assert (
        stage_ahead(make_runtime("local")),
        stage_ahead(make_runtime("local"), libraries_first=True),
    ) == (1, 2)
    assert (
        stage_ahead(make_runtime("docker")),
        stage_ahead(make_runtime("docker"), libraries_first=True),
    ) == (2, 2)
    for depth in ("0", "1", "3"):
        monkeypatch.setenv(STAGE_SWITCH, depth)
        assert stage_ahead(make_runtime("host"), libraries_first=True) == int(depth)


def test_the_repository_s_library_solutions_are_those_that_import_a_library_first() -> None:
    """The FA4, FlashInfer, FlashMLA, TileLang, NATTEN, DeepGEMM and SGLang solutions of
    solutions/ (found as an audit finds them) import their library first; the torch, Triton and
    FlexAttention ones do not."""
    from envaudit.runtime.jobs import find_solution
    from envaudit.runtime.scheduling.audit import solution_imports_libraries_first

    root = Path(__file__).resolve().parents[2] / "solutions"
    names = sorted(p.parent.name for p in root.glob("*/solution.json"))
    found = {n for n in names if solution_imports_libraries_first(*find_solution(n, root))}
    libraries = ("-fa4", "-flashinfer", "-flashmla", "-tilelang", "-natten", "-deepgemm", "-sglang")
    libraries += ("-deepgemm-contiguous", "-deepgemm-masked")
    assert found == {n for n in names if n.endswith(libraries)}
    assert all(any(n.endswith(suffix) for n in found) for suffix in libraries)


def test_a_plan_parses_each_solution_once_and_never_keeps_a_missing_one(tmp_path: Path) -> None:
    """The plan's checks, order and staging share one parse per solution; a name that is not
    there stays an error (RunRequestError, exit 2) every time it is asked for."""
    from envaudit.runtime.jobs import RunRequestError
    from envaudit.runtime.scheduling.audit import AuditPlan

    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    plan = AuditPlan(
        ["correct"], [(None, "cpu")], tmp_path / "out", "host", solutions_root=solutions
    )
    first = plan.solution("correct")
    (solutions / "correct" / "solution.json").write_text("{ not json")
    assert plan.solution("correct") is first
    assert first[1].name == "correct"
    for _ in range(2):
        with pytest.raises(RunRequestError, match="no solution"):
            plan.solution("absent")
    (solutions / "absent").mkdir()
    (solutions / "absent" / "solution.json").write_text("{}")
    with pytest.raises(RunRequestError, match=r"not a valid solution\.json"):
        plan.solution("absent")


def test_malformed_and_deep_lines_in_the_results_and_workload_files(tmp_path: Path) -> None:
    """Lines a hostile solution or a broken dataset leaves behind (no workload, not an object,
    JSON nested 100,000 deep) are passed over by --resume and by the supervisor's re-read of
    the workload file; a line longer than any result line ends the audit before any job, exit 2,
    naming the file and line."""
    root = write_toy_root(tmp_path / "data")
    [workload_file] = (root / "workloads").rglob("*.jsonl")
    deep = "[" * 100_000 + "]" * 100_000
    with workload_file.open("a") as handle:
        handle.write(deep + "\n" + '{"workload": 3}\n')
    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    out = tmp_path / "a"
    out.mkdir()
    junk = ['{"a": 1}', "[]", '{"workload": 5, "solution": 7}', deep, "{not json"]
    (out / "results.jsonl").write_text("".join(j + "\n" for j in junk))
    result = CliRunner().invoke(
        app,
        [
            *("audit", "--runtime", "host", "--device", "cpu", "--data-root", str(root)),
            *("--out", str(out), "--solutions-root", str(solutions), "--solution", "correct"),
            "--resume",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "1 PASSED" in result.output, result.output
    kept = (out / "results.jsonl").read_text().splitlines()
    assert kept[: len(junk)] == junk and json.loads(kept[-1])["status"] == "PASSED"
    with (out / "results.jsonl").open("a") as handle:
        handle.write("x" * (64 * 1024 * 1024 + 10) + "\n")
    result = CliRunner().invoke(
        app,
        [
            *("audit", "--runtime", "host", "--device", "cpu", "--data-root", str(root)),
            *("--out", str(out), "--solutions-root", str(solutions), "--solution", "correct"),
            "--resume",
        ],
    )
    assert result.exit_code == 2, result.output
    assert f"results.jsonl:{len(kept) + 1}: a line longer than" in result.output, result.output


def test_audit_takes_the_locks_folder_as_run_does(tmp_path: Path) -> None:
    """--locks-dir reaches every job: the host runtime checks its interpreter against the lock
    found there (none here, so the line says why there is no verdict, naming the folder)."""
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    empty = tmp_path / "no-locks"
    empty.mkdir()
    argv = ["audit", "--runtime", "host", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "solutions"), "--out", str(tmp_path / "a")]
    result = CliRunner().invoke(app, [*argv, "--locks-dir", str(empty)])
    assert result.exit_code == 0, result.output
    [line] = [json.loads(x) for x in (tmp_path / "a" / "results.jsonl").read_text().splitlines()]
    check = line["context"]["env_check"]
    assert check["matches"] is None and str(empty) in check["reason"], check
