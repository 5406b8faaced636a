"""evomem from Python: the Rust engine, evaluation harness and service client.

Load a dataset, run built-in memory policies and policies written in Python
through the same leakage-free loop, metrics and run folder as ``evomem
eval``, compare runs with paired-bootstrap deltas, embed texts with the
project's MiniLM, and talk to ``evomem serve``::

    import evomem
    data = evomem.load("ml-100k", format="recbole")
    res = evomem.evaluate(data, policies=["pop", "seqmem"], users=100)
    print(res.table())

The GIL: ``evaluate`` runs the loop with the GIL released and takes it only
inside the calls into a Python policy's methods. Built-in policies run in
parallel as in the CLI; Python policies run one call at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import ops
from ._evomem import (
    Ctx,
    DataError,
    Dataset,
    EvalError,
    Event,
    FeedbackEvent,
    LeakError,
    PolicyError,
    Query,
    ROLES,
    __version__,
)
from . import _evomem as _native
from .client import Client, ServiceError

__all__ = [
    "Client",
    "Comparison",
    "Ctx",
    "DataError",
    "Dataset",
    "EvalError",
    "EvalResult",
    "Event",
    "FeedbackEvent",
    "LeakError",
    "PolicyError",
    "PolicyResult",
    "Query",
    "ROLES",
    "ServiceError",
    "compare",
    "embed",
    "evaluate",
    "load",
    "ops",
    "replay_ops",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]


def load(path: PathLike, format: Optional[str] = None) -> Dataset:
    """Load a dataset folder or file with the Rust loaders.

    ``format`` is ``"recbole"``, ``"agentcf"``, ``"iagent"`` or ``"jsonl"``;
    detected from the files when omitted. Raises :class:`DataError` (a
    ``ValueError``) naming the file, line and field of a bad value.
    """
    return _native.load(os.fspath(path), format)


@dataclass
class PolicyResult:
    """One policy's results: mean metrics, per-user rows, op counts, timing."""

    spec: str
    slug: str
    metrics: Dict[str, float]
    n_users: int
    ops_total: int
    op_labels: Dict[str, int]
    ops_by_op: Dict[str, int]
    wall_s: float
    per_user: List[Dict[str, Any]]
    path: Optional[Path] = None
    """The policy's folder in the run folder (``None`` without ``out=``)."""
    policy_stats: Any = None


@dataclass
class EvalResult:
    """What :func:`evaluate` returns: one :class:`PolicyResult` per policy,
    in the order given, plus the run's timing and plan."""

    policies: Dict[str, PolicyResult]
    wall_s: float
    plan: Dict[str, Any]
    model: str
    out: Optional[Path] = None
    memory: Dict[str, List[Dict[str, Any]]] = field(default_factory=dict)
    """Final memory of each Python policy (with ``return_memory=True``)."""

    def __getitem__(self, spec: str) -> PolicyResult:
        return self.policies[spec]

    def __iter__(self):
        return iter(self.policies.values())

    def metrics(self) -> Dict[str, Dict[str, float]]:
        """Mean metrics per policy spec."""
        return {k: p.metrics for k, p in self.policies.items()}

    def table(self) -> str:
        """A plain-text table of the mean metrics."""
        names = ["HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR"]
        width = max([len("policy")] + [len(s) for s in self.policies])
        lines = [f"{'policy':<{width}} " + " ".join(f"{n:>8}" for n in names)]
        for spec, p in self.policies.items():
            vals = " ".join(f"{p.metrics.get(n, float('nan')):>8.4f}" for n in names)
            lines.append(f"{spec:<{width}} {vals}")
        return "\n".join(lines)

    def to_pandas(self, per_user: bool = False):
        """The metrics as a pandas DataFrame: one row per policy, or with
        ``per_user=True`` one row per (policy, user). Needs pandas."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - depends on the env
            raise ImportError("to_pandas() needs pandas: pip install pandas") from e
        if per_user:
            rows = [dict(policy=s, **r) for s, p in self.policies.items() for r in p.per_user]
            return pd.DataFrame(rows)
        rows = [
            dict(policy=s, n_users=p.n_users, ops_total=p.ops_total, wall_s=p.wall_s, **p.metrics)
            for s, p in self.policies.items()
        ]
        return pd.DataFrame(rows).set_index("policy")


def _read_jsonl(path: Path) -> List[Dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def evaluate(
    data: Union[Dataset, PathLike],
    policies: Sequence[Any] = ("pop", "seqmem"),
    protocol: str = "retrospective",
    negatives: int = 9,
    seed: int = 42,
    target: str = "test",
    users: Union[None, int, str] = None,
    out: Optional[PathLike] = None,
    *,
    memory_users: str = "selected",
    sampling: str = "uniform",
    fixed_candidates: str = "as-given",
    tick: int = 1000,
    ops_log: bool = True,
    models_dir: Optional[PathLike] = None,
    threads: int = 0,
    embed_cache: str = "auto",
    return_memory: bool = False,
    llm: str = "offline",
    llm_roles: Optional[Mapping[str, str]] = None,
    llm_cache: str = "off",
    llm_cache_path: Optional[PathLike] = None,
) -> EvalResult:
    """Run ``policies`` on ``data`` under a leakage-free ranking protocol.

    ``policies`` holds spec strings (``"pop"``, ``"mars[tiers=none]"``, or a
    comma-separated list) and Python policy objects (any object with some of
    ``observe``, ``recall``, ``feedback``, ``maintain``; see
    ``docs/python.md``), run in the order given. The arguments mean what
    ``evomem eval``'s flags mean; ``users`` is ``None`` (all), a number of
    users (seeded choice), ``"active"`` or ``"light"``.

    ``llm`` is every LLM role's backend (``"offline"``, the default, or
    ``"openai:<model>@<base_url>"``), ``llm_roles`` overrides it per role
    (``{"mars_extract": "openai:..."}``), ``llm_cache`` is ``"off"``,
    ``"read-write"`` or ``"replay-only"`` with its file ``llm_cache_path``
    (default ``OUT/llm-cache.sqlite``), as ``evomem eval``'s ``--llm``,
    ``--llm-role``, ``--llm-cache`` and ``--llm-cache-path``. The API key is
    read from ``OPENAI_API_KEY``. Python policies call the roles through
    the same hub (``ctx.role``, ``ctx.rank``).

    With ``out=`` the run folder is written there, the same folder ``evomem
    eval --out`` writes (``evomem compare``, ``inspect`` and ``explain`` read
    it; for the same arguments ``metrics.json`` is byte-identical); without,
    it is written to a temporary folder that is removed afterwards.

    Raises :class:`PolicyError` naming the policy and method when a policy
    fails (a Python policy's exception included), :class:`LeakError` when
    the leak canary catches a policy, :class:`EvalError` otherwise; a failed
    run leaves no ``summary.json`` or ``metrics.json`` behind.
    """
    if not isinstance(data, Dataset):
        data = load(data)
    if isinstance(policies, (str, bytes)) or not isinstance(policies, Iterable):
        policies = [policies]
    users_arg = "all" if users is None else str(users)
    tmp = None
    if out is None:
        tmp = tempfile.mkdtemp(prefix="evomem-run-")
        run_dir = Path(tmp)
    else:
        run_dir = Path(out)
    try:
        summary_text, memory = _native.evaluate(
            data,
            list(policies),
            os.fspath(run_dir),
            protocol=protocol,
            negatives=negatives,
            seed=seed,
            target=target,
            users=users_arg,
            memory_users=memory_users,
            sampling=sampling,
            fixed_candidates=fixed_candidates,
            tick=tick,
            ops_log=ops_log,
            models_dir=None if models_dir is None else os.fspath(models_dir),
            threads=threads,
            embed_cache=embed_cache,
            return_memory=return_memory,
            llm=llm,
            llm_roles=None if llm_roles is None else dict(llm_roles),
            llm_cache=llm_cache,
            llm_cache_path=None if llm_cache_path is None else os.fspath(llm_cache_path),
        )
        summary = json.loads(summary_text)
        results: Dict[str, PolicyResult] = {}
        for p, wall in zip(summary["policies"], summary["policy_wall_s"]):
            pdir = run_dir / p["slug"]
            with open(pdir / "metrics.json", encoding="utf-8") as f:
                m = json.load(f)
            results[p["spec"]] = PolicyResult(
                spec=p["spec"],
                slug=p["slug"],
                metrics=p["metrics"],
                n_users=p["n_users"],
                ops_total=p["ops_total"],
                op_labels=p["op_labels"],
                ops_by_op=m.get("ops", {}).get("by_op", {}),
                wall_s=wall,
                per_user=_read_jsonl(pdir / "per_user.jsonl"),
                path=None if tmp else pdir,
                policy_stats=m.get("policy_stats"),
            )
        return EvalResult(
            policies=results,
            wall_s=summary["wall_s"],
            plan=summary["plan"],
            model=summary["model"],
            out=None if tmp else run_dir,
            memory=dict(memory),
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Comparison:
    """Paired-bootstrap deltas ``B - A`` per metric over the users both runs
    ranked (the numbers of ``evomem compare``)."""

    common_users: int
    only_a: int
    only_b: int
    target_mismatch: int
    metrics: Dict[str, Dict[str, float]]

    def __str__(self) -> str:
        lines = [f"{'metric':<8} {'A':>8} {'B':>8} {'B-A':>9} {'95% CI':>21} {'p':>7}"]
        for name, c in self.metrics.items():
            ci = f"[{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]"
            lines.append(
                f"{name:<8} {c['mean_a']:>8.4f} {c['mean_b']:>8.4f} {c['delta']:>+9.4f} {ci:>21} {c['p_value']:>7.3f}"
            )
        return "\n".join(lines)


def _per_user_text(x: Union[PolicyResult, PathLike]) -> str:
    if isinstance(x, PolicyResult):
        return "\n".join(json.dumps(r) for r in x.per_user)
    p = Path(x)
    if p.is_dir():
        p = p / "per_user.jsonl"
    return p.read_text(encoding="utf-8")


def compare(
    a: Union[PolicyResult, PathLike],
    b: Union[PolicyResult, PathLike],
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 42,
) -> Comparison:
    """Paired-bootstrap deltas ``B - A``: ``a`` and ``b`` are
    :class:`PolicyResult` objects or policy folders of run folders."""
    c = json.loads(_native.compare_per_user(_per_user_text(a), _per_user_text(b), resamples, level, seed))
    return Comparison(
        common_users=c["common_users"],
        only_a=c["only_a"],
        only_b=c["only_b"],
        target_mismatch=c["target_mismatch"],
        metrics={name: ci for name, ci in c["metrics"]},
    )


def replay_ops(policy_dir: PathLike) -> List[Dict[str, Any]]:
    """Replay a policy folder's op log into an empty memory; its records, by id."""
    return _native.replay_ops(os.fspath(policy_dir))


def embed(
    texts: Sequence[str],
    models_dir: Optional[PathLike] = None,
    threads: int = 0,
):
    """Embed ``texts`` with the project's MiniLM (``all-MiniLM-L6-v2`` in
    ``~/.cache/evomem/models``, fetched by ``scripts/fetch-models.sh``) as a
    ``numpy.ndarray`` of shape ``(len(texts), 384)``, float32, rows
    L2-normalised. Without the model it falls back to the hashing embedder
    with a warning, as ``evomem eval`` does."""
    import numpy as np

    if isinstance(texts, str):
        texts = [texts]
    model, dim, raw, notice = _native.embed_raw(
        list(texts), None if models_dir is None else os.fspath(models_dir), threads
    )
    if notice:
        import warnings

        warnings.warn(notice, stacklevel=2)
    arr = np.frombuffer(raw, dtype="<f4").reshape(len(texts), dim).copy()
    return arr
