"""``graphexec bench``: min, median, p90, p99 and throughput over thread settings, with a
batch, as a table, JSON or CSV; a progress bar only on a terminal."""

from __future__ import annotations

import csv
import io
import json

from graphexec.cli import _progress, bench, main
from tests.graphexec.cli_support import MODEL, loggers_quiet_again  # noqa: F401

BENCH = ["bench", str(MODEL), "--threads", "1", "2", "--rounds", "3", "--warmup", "1"]


def table_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip() and line.split()[0].isdigit()]


def test_bench_prints_a_table_over_thread_counts(capsys):
    assert main([*BENCH, "--progress", "never"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].endswith("batch 1, 3 interleaved rounds after 1 warm-up, 2 cores") or \
        "batch 1, 3 interleaved rounds after 1 warm-up" in captured.out
    header = captured.out.splitlines()[1].split()
    assert header == ["workers", "BLAS", "min", "ms", "median", "ms", "p90", "ms", "p99", "ms", "samples/s", "speedup"]
    rows = table_rows(captured.out)
    assert [r[:2] for r in rows[:2]] == [["1", "1"], ["2", "1"]]  # given workers: one BLAS thread each
    assert rows[2][-4:] == ["(chosen", "by", "the", "engine)"]  # and what Engine.load(path) picks
    assert rows[0][7] == "1.00x"
    for row in rows:
        low, median, p90, p99, rate = map(float, row[2:7])
        assert low <= median <= p90 <= p99
        assert abs(rate - 1e3 / median) <= 0.01 * rate  # batch 1: one sample per median run
    assert captured.err == ""


def test_bench_takes_a_batch_and_writes_json(tmp_path, capsys):
    target = tmp_path / "r.json"
    assert main([*BENCH, "--batch", "3", "--json", str(target)]) == 0
    out = capsys.readouterr().out
    assert "batch 3, 3 interleaved rounds" in out
    result = json.loads(target.read_text())
    assert result["batch"] == 3 and result["inputs"] == [[3, 3, 64, 64]] and result["rounds"] == 3
    assert [(r["workers"], r["blas_threads"], r["chosen_by_engine"]) for r in result["rows"]][:2] == \
        [(1, 1, False), (2, 1, False)]
    for row in result["rows"]:
        assert set(row) == set(bench.FIELDS)
        assert row["min_ms"] <= row["median_ms"] <= row["p90_ms"] <= row["p99_ms"]
        assert abs(row["throughput_per_s"] - 3e3 / row["median_ms"]) <= 0.01 * row["throughput_per_s"]


def test_bench_writes_csv_to_stdout_without_the_table(capsys):
    assert main([*BENCH, "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["workers"] for r in rows] == ["1", "2", rows[2]["workers"]] and rows[2]["chosen_by_engine"] == "True"
    assert set(rows[0]) == {"model", *bench.FIELDS} and rows[0]["model"] == str(MODEL)
    assert float(rows[0]["speedup"]) == 1.0


def test_progress_shows_only_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert _progress.wanted("auto", Terminal(), expected_seconds=10)
    assert not _progress.wanted("auto", Terminal(), expected_seconds=0.5)  # over before anyone looks
    assert not _progress.wanted("auto", io.StringIO(), expected_seconds=100)  # a redirected log
    assert _progress.wanted("always", io.StringIO(), expected_seconds=0)
    assert not _progress.wanted("never", Terminal(), expected_seconds=100)


def test_progress_always_draws_on_stderr(capsys):
    assert main([*BENCH, "--progress", "always"]) == 0
    err = capsys.readouterr().err
    assert "bench [" in err and "4/4" in err  # 1 warm-up + 3 rounds


def test_progress_bar_draws_in_place():
    stream = io.StringIO()
    bar = _progress.ProgressBar(4, "bench", stream=stream, width=8)
    for _ in range(4):
        bar.advance()
    bar.close()
    text = stream.getvalue()
    assert text.count("\r") == 4 and "[########] 4/4" in text and text.endswith("\n")
