"""Task runner: resumable outputs, per-task failures, local and dask.distributed execution."""

import io

import pytest

from xengine_block.reprocess.tasks import Task, run_tasks, summarise


def upper_case(task: Task) -> dict:
    """A stand-in task: fails on inputs containing 'bad', else writes the upper-cased text."""
    text = task.input.read_text()
    if "bad" in text:
        raise ValueError(f"{task.input.name} is corrupt")
    task.partial.write_text(text.upper())
    return {"chars": len(text)}


def make_tasks(tmp_path, texts):
    tasks = []
    for i, text in enumerate(texts):
        src = tmp_path / f"in{i}.txt"
        src.write_text(text)
        tasks.append(Task(src, tmp_path / f"out{i}.txt"))
    return tasks


def test_failures_are_isolated_and_reported(tmp_path):
    tasks = make_tasks(tmp_path, ["a", "bad", "c"])
    results = run_tasks(tasks, upper_case, progress=None)
    assert [r.ok for r in results] == [True, False, True]
    assert "in1.txt is corrupt" in results[1].error
    assert not tasks[1].output.exists() and tasks[2].output.read_text() == "C"
    out = io.StringIO()
    assert summarise(results, out) is False
    assert "FAILED   " in out.getvalue() and "in1.txt" in out.getvalue()


def test_rerun_skips_complete_and_redoes_partial(tmp_path):
    tasks = make_tasks(tmp_path, ["a", "b"])
    tasks[0].output.write_text("DONE BEFORE")
    tasks[1].partial.write_text("half")  # interrupted run
    results = run_tasks(tasks, upper_case, progress=None)
    assert results[0].skipped and tasks[0].output.read_text() == "DONE BEFORE"
    assert not results[1].skipped and tasks[1].output.read_text() == "B"
    assert not tasks[1].partial.exists()


def test_progress_line(tmp_path):
    tasks = make_tasks(tmp_path, ["x" * 100, "y"])
    stream = io.StringIO()
    run_tasks(tasks, upper_case, progress=stream)
    assert "[2/2]" in stream.getvalue() and "ETA" in stream.getvalue()


@pytest.mark.timeout(120)
def test_local_cluster_matches_local_run(tmp_path):
    pytest.importorskip("dask.distributed", reason="dask.distributed is an optional extra")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    local = make_tasks(tmp_path / "a", ["one", "two", "bad", "four"])
    dist = make_tasks(tmp_path / "b", ["one", "two", "bad", "four"])
    r1 = run_tasks(local, upper_case, progress=None)
    r2 = run_tasks(dist, upper_case, workers=2, progress=None)
    assert [r.ok for r in r1] == [r.ok for r in r2] == [True, True, False, True]
    for t1, t2 in zip(local, dist, strict=True):
        if t1.output.exists():
            assert t1.output.read_bytes() == t2.output.read_bytes()
