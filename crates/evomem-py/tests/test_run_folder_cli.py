"""`evomem inspect` and `evomem explain` on the run folder of a Python
policy (`evaluate(..., out=)`): its family is in no family table, so both
read it with the generic view."""

import subprocess

import evomem
from evomem import ops


class Notes:
    """One note per observed item; recall scores candidates by how many
    notes share their category and reports the notes it used."""

    name = "notes"

    def observe(self, ctx, e):
        it = ctx.item(e.item)
        return [
            ops.create(
                f"user:{e.user}:note:{e.time}", ops.user_ns(e.user), f"saw {it['title']}", ctx.now,
                kind="summary", fields={"cats": it["categories"]}, label="note", reason="observed", sources=[e.time],
            )
        ]

    def recall(self, ctx, q):
        recs = ctx.records(ops.user_ns(q.user))
        cats = [c for r in recs for c in r["fields"]["cats"]]
        scores = [sum(cats.count(c) for c in ctx.item(i)["categories"]) for i in q.candidates]
        return {"scores": scores, "used": [r["id"] for r in recs[:2]]}


def run_cli(evomem_bin, *args):
    p = subprocess.run([str(evomem_bin), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"evomem {' '.join(args)} failed:\n{p.stderr}"
    return p.stdout


def test_inspect_and_explain_read_a_python_policys_run_folder(toy, tmp_path, evomem_bin):
    run = tmp_path / "run"
    evomem.evaluate(toy, policies=["pop", Notes()], negatives=4, out=run)
    out = run_cli(evomem_bin, "inspect", "--run", str(run), "--user", "u1", "--policy", "notes")
    # Every op of the user (no lifecycle table for a Python policy), the
    # label distribution, and the final records by kind.
    assert "user u1 — 7 ops" in out, out
    assert out.count(" note ") >= 7 and "saw " in out and "— observed" in out, out
    assert "all ops: 7" in out and "note 100% (7)" in out, out
    assert "final memory (7 records):" in out and "[summary] user:u1:note:" in out, out
    out = run_cli(evomem_bin, "explain", "--run", str(run), "--user", "u1", "--policy", "notes")
    # No evidence paths: the memories the recall reported using, with the
    # op that wrote each.
    assert "top-ranked candidate" in out, out
    assert "memories used (2):" in out, out
    assert out.count("op #") == 2 and "create [note]" in out and "observed (sources: t" in out, out
    # Without --policy both pick the one policy that is no built-in family.
    for cmd in ("inspect", "explain"):
        with_flag = run_cli(evomem_bin, cmd, "--run", str(run), "--user", "u1", "--policy", "notes")
        assert run_cli(evomem_bin, cmd, "--run", str(run), "--user", "u1") == with_flag, cmd
