"""Policies written in Python inside the Rust loop: ops and replay, the
leak canary, errors naming the policy and method, the embedder."""

import json

import pytest

import evomem
from evomem import ops


class EventMemory:
    """One event record per observed interaction; ranks candidates by how
    often their categories appear among the user's events."""

    name = "event-memory"

    def __init__(self):
        self.calls = {"observe": 0, "recall": 0, "feedback": 0, "maintain": 0}

    def observe(self, ctx, e):
        self.calls["observe"] += 1
        rid = f"user:{e.user}:ev:{e.time}"
        cats = ctx.item(e.item)["categories"]
        return [
            ops.create(rid, ops.user_ns(e.user), f"{e.item}", ctx.now, fields={"item": e.item, "cats": cats}, sources=[e.time])
        ]

    def recall(self, ctx, q):
        self.calls["recall"] += 1
        counts = {}
        recs = ctx.records(ops.user_ns(q.user))
        for r in recs:
            for c in r["fields"]["cats"]:
                counts[c] = counts.get(c, 0) + 1
        scores = [sum(counts.get(c, 0) for c in ctx.item(i)["categories"]) for i in q.candidates]
        return {"scores": scores, "used": [r["id"] for r in recs[:3]]}

    def feedback(self, ctx, f):
        self.calls["feedback"] += 1
        rid = f"user:{f.user}:fb:{f.decision_id}"
        return [ops.create(rid, ops.user_ns(f.user), f"outcome {f.reward:.2f}", ctx.now, kind="summary", sources=[f.observed_at])]

    def maintain(self, ctx, trigger):
        self.calls["maintain"] += 1
        return None

    def stats(self):
        return dict(self.calls)


def test_a_python_policy_runs_beside_rust_policies_and_its_op_log_replays(toy, tmp_path):
    pol = EventMemory()
    res = evomem.evaluate(toy, policies=["pop", pol], negatives=4, out=tmp_path / "run", return_memory=True)
    r = res["event-memory"]
    assert r.ops_total == toy.n_interactions - toy.n_users, "one create per visible interaction (all but the test)"
    assert r.op_labels == {"extract": r.ops_total}
    assert r.policy_stats["recall"] == toy.n_users
    assert pol.calls["observe"] > 0 and pol.calls["maintain"] >= 1
    # Its op log replays to exactly the memory it built and read.
    replayed = evomem.replay_ops(r.path)
    assert replayed == res.memory["event-memory"]
    assert len(replayed) == r.ops_total
    # The run folder is complete, as the CLI writes it.
    m = json.loads((r.path / "metrics.json").read_text())
    assert m["policy"] == "event-memory" and m["ops"]["total"] == r.ops_total
    assert r.metrics["NDCG@10"] > res["pop"].metrics["NDCG@10"] - 1.0


def test_evolving_feedback_reaches_a_python_policy_and_replays(toy, tmp_path):
    pol = EventMemory()
    res = evomem.evaluate(toy, policies=[pol], protocol="evolving", negatives=4, out=tmp_path / "run", return_memory=True)
    assert pol.calls["feedback"] == toy.n_users
    assert evomem.replay_ops(res["event-memory"].path) == res.memory["event-memory"]


class Peeker:
    """Writes memory about the user's *next* interaction, read from the
    dataset it closed over: what the protocol never shows."""

    name = "peeker"

    def __init__(self, data):
        self.future = {}
        for u, i, _, _, t in data.interactions():
            self.future.setdefault(u, []).append((t, i))

    def observe(self, ctx, e):
        later = [(t, i) for t, i in self.future[e.user] if t > e.time]
        if not later:
            return []
        t, i = later[-1]
        return [ops.create(f"peek:{e.time}", ops.user_ns(e.user), f"will like {i}", ctx.now, sources=[t])]

    def recall(self, ctx, q):
        return [0.0] * len(q.candidates)


@pytest.mark.parametrize("protocol", ["retrospective", "evolving"])
def test_a_policy_that_peeks_at_the_target_fails_the_leak_canary(toy, tmp_path, protocol):
    out = tmp_path / "run"
    with pytest.raises(evomem.LeakError, match=r"leak canary: Python policy `peeker`\.observe") as e:
        evomem.evaluate(toy, policies=["pop", Peeker(toy)], protocol=protocol, negatives=4, out=out)
    assert isinstance(e.value, evomem.EvalError)
    assert not (out / "summary.json").exists() and not (out / "peeker" / "metrics.json").exists()


class Boom:
    name = "boom"

    def recall(self, ctx, q):
        return 1 / 0


def test_a_python_exception_names_the_policy_and_method_and_leaves_no_complete_run(toy, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(evomem.PolicyError) as e:
        evomem.evaluate(toy, policies=["pop", Boom()], negatives=4, out=out)
    msg = str(e.value)
    assert "`boom`.recall" in msg and "ZeroDivisionError" in msg and "division by zero" in msg
    assert "return 1 / 0" in msg or "test_python_policy.py" in msg, "the traceback"
    for f in ["summary.json", "report.md", "config.json"]:
        assert not (out / f).exists(), f
    assert not (out / "boom" / "metrics.json").exists() and not (out / "boom" / "ops.jsonl.zst").exists()


def test_bad_return_values_and_ops_are_named(toy):
    class BadRecall:
        name = "bad-recall"

        def recall(self, ctx, q):
            return "first"

    with pytest.raises(evomem.PolicyError, match=r"`bad-recall`\.recall returned"):
        evomem.evaluate(toy, policies=[BadRecall()], negatives=4)

    class BadOp:
        name = "bad-op"

        def observe(self, ctx, e):
            return [{"op": {"op": "explode"}}]

    with pytest.raises(evomem.PolicyError, match=r"`bad-op`\.observe returned a malformed op"):
        evomem.evaluate(toy, policies=[BadOp()], negatives=4)

    class Dup:
        name = "dup"

        def observe(self, ctx, e):
            return [ops.create("same", ops.user_ns(e.user), "x", ctx.now, sources=[e.time])]

    with pytest.raises(evomem.PolicyError, match="dup"):
        evomem.evaluate(toy, policies=[Dup()], negatives=4)


def test_a_policy_without_methods_keeps_the_defaults_and_names_are_checked(toy):
    class Nothing:
        pass

    res = evomem.evaluate(toy, policies=[Nothing()], negatives=4)
    assert res["Nothing"].ops_total == 0
    with pytest.raises(evomem.EvalError, match="family name"):
        evomem.evaluate(toy, policies=[type("pop", (), {})()], negatives=4)
    with pytest.raises(ValueError, match="policy name"):
        evomem.evaluate(toy, policies=[type("X", (), {"name": "a b"})()], negatives=4)


def test_a_python_policy_calls_the_embedder_through_its_context(toy):
    seen = {}

    class Embeds:
        name = "embeds"

        def recall(self, ctx, q):
            vecs = ctx.embed([ctx.item_text(i) for i in q.candidates])
            seen["dim"] = len(vecs[0])
            seen["model"] = ctx.model_id
            return [v[0] for v in vecs]

    res = evomem.evaluate(toy, policies=[Embeds()], negatives=4)
    assert seen["dim"] in (384, 256) and seen["model"] == res.model


def test_a_python_policy_calls_the_rank_role_through_its_hub(toy, tmp_path):
    class Ranker:
        name = "ranker"

        def recall(self, ctx, q):
            scores = ctx.rank(q.user, list(q.candidates), profile="likes jazz", entries=["rated 5: Jazz film 1"])
            assert len(scores) == len(q.candidates)
            return scores

    res = evomem.evaluate(toy, policies=[Ranker()], negatives=4, out=tmp_path / "run")
    m = json.loads((res["ranker"].path / "metrics.json").read_text())
    rank = m["llm"]["per_role"]["rank"]
    # The decider's rank run per decision plus the policy's own, on one hub:
    # the run's accounting sees the policy's calls.
    assert rank["runs"] == 2 * toy.n_users and rank["offline_runs"] == rank["runs"]
