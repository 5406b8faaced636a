"""`evaluate` and `compare`: results, run folders, and byte-identical
`metrics.json` against `evomem eval`."""

import json
import subprocess

import pytest

import evomem


def test_evaluate_returns_metrics_rows_ops_and_timing(toy):
    res = evomem.evaluate(toy, policies=["pop", "seqmem"], negatives=4)
    assert list(res.policies) == ["pop", "seqmem"]
    for p in res:
        assert 0.0 <= p.metrics["NDCG@10"] <= 1.0
        assert p.n_users == 12 and len(p.per_user) == 12
        assert {"user", "target", "rank", "NDCG@10"} <= set(p.per_user[0])
        assert p.wall_s >= 0 and p.path is None
    assert res["seqmem"].ops_total > 0 and res["seqmem"].ops_by_op
    assert res.out is None and res.wall_s > 0
    assert "seqmem" in res.table()


def test_to_pandas_when_pandas_is_installed(toy):
    pd = pytest.importorskip("pandas")
    res = evomem.evaluate(toy, policies=["pop"], negatives=4)
    assert list(res.to_pandas().index) == ["pop"]
    assert len(res.to_pandas(per_user=True)) == 12


def test_bad_arguments_raise_clear_errors(toy):
    with pytest.raises(ValueError, match="protocol"):
        evomem.evaluate(toy, policies=["pop"], protocol="sideways")
    with pytest.raises(evomem.EvalError, match="unknown policy `nope`"):
        evomem.evaluate(toy, policies=["nope"])


def test_metrics_json_is_byte_identical_to_the_cli(ml100k, evomem_bin, tmp_path):
    cli_out, py_out = tmp_path / "cli", tmp_path / "py"
    args = ["--policy", "pop,seqmem", "--users", "40", "--negatives", "9", "--seed", "7", "--target", "valid"]
    subprocess.run(
        [str(evomem_bin), "eval", "--data", str(ml100k), "--format", "recbole", *args, "--out", str(cli_out)],
        check=True,
        capture_output=True,
    )
    data = evomem.load(ml100k, format="recbole")
    res = evomem.evaluate(data, policies=["pop", "seqmem"], users=40, seed=7, target="valid", out=py_out)
    for slug in ["pop", "seqmem"]:
        a = (cli_out / slug / "metrics.json").read_bytes()
        b = (py_out / slug / "metrics.json").read_bytes()
        assert a == b, f"{slug}/metrics.json differs"
        assert (py_out / slug / "per_user.jsonl").read_bytes() == (cli_out / slug / "per_user.jsonl").read_bytes()
    assert (py_out / "report.md").is_file() and (py_out / "summary.json").is_file()
    assert res["seqmem"].path == py_out / "seqmem"


def test_compare_gives_paired_bootstrap_deltas(toy, tmp_path):
    res = evomem.evaluate(toy, policies=["random", "seqmem"], negatives=4, out=tmp_path / "run")
    c = evomem.compare(res["random"], res["seqmem"])
    assert c.common_users == 12 and c.only_a == 0 and c.target_mismatch == 0
    d = c.metrics["NDCG@10"]
    assert d["delta"] == pytest.approx(d["mean_b"] - d["mean_a"])
    assert d["ci_low"] <= d["delta"] <= d["ci_high"]
    from_dirs = evomem.compare(tmp_path / "run" / "random", tmp_path / "run" / "seqmem")
    assert from_dirs.metrics == c.metrics, "the same numbers from the run folders"
    assert "NDCG@10" in str(c)
