"""Memory ops for Python policies.

A policy never writes memory itself: ``observe``, ``feedback`` and
``maintain`` return a list of ops built here, and the engine validates,
applies and logs them exactly as it does a Rust family's (so the op log,
replay and ``evomem inspect`` work). Each function returns a plain dict
``{"op": {...}, "label": ..., "reason": ..., "sources": [...]}`` whose
``op`` has the JSON shape of the Rust ``MemoryOp``.

``sources`` are the logical times of the interactions that caused the op
(``event.time``, ``feedback.observed_at``); the leak canary fails a run
whose ops cite an interaction the protocol has not shown the policy.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

Op = Dict[str, Any]

#: Record kinds of the engine; any other string becomes a custom kind.
KINDS = ("event", "preference_chunk", "profile", "atom", "utility_slot", "guideline", "summary")


def user_ns(user: str) -> str:
    """The private namespace of a user: ``user:<token>``."""
    return f"user:{user}"


def item_ns(item: str) -> str:
    """The namespace of an item: ``item:<token>``."""
    return f"item:{item}"


def _planned(op: Dict[str, Any], label: str, reason: str, sources: Optional[Sequence[int]]) -> Op:
    return {"op": op, "label": label, "reason": reason, "sources": [int(s) for s in (sources or [])]}


def _kind(kind: str) -> Any:
    return kind if kind in KINDS else {"custom": kind}


def create(
    id: str,
    namespace: str,
    text: str,
    at: int,
    *,
    kind: str = "event",
    fields: Optional[Mapping[str, Any]] = None,
    strength: float = 0.0,
    evidence: int = 0,
    utility: float = 0.0,
    label: str = "extract",
    reason: str = "",
    sources: Optional[Sequence[int]] = None,
) -> Op:
    """Create record ``id`` in ``namespace`` at logical time ``at`` (usually
    ``ctx.now``). Fails the run if the id exists."""
    record = {
        "id": id,
        "namespace": namespace,
        "kind": _kind(kind),
        "text": text,
        "fields": dict(fields or {}),
        "strength": float(strength),
        "evidence": int(evidence),
        "utility": float(utility),
        "status": "active",
        "embedding": None,
        "links": [],
        "created_at": int(at),
        "updated_at": int(at),
    }
    return _planned({"op": "create", "record": record}, label, reason, sources)


def update_fields(
    id: str,
    fields: Mapping[str, Any],
    text: Optional[str] = None,
    *,
    label: str = "update",
    reason: str = "",
    sources: Optional[Sequence[int]] = None,
) -> Op:
    """Set ``fields`` of record ``id`` (``None`` removes a field), and its
    text when given."""
    op = {"op": "update_fields", "id": id, "fields": dict(fields), "text": text, "embedding": None}
    return _planned(op, label, reason, sources)


def link(
    source: str,
    target: str,
    relation: str,
    weight: float = 1.0,
    *,
    label: str = "link",
    reason: str = "",
    sources: Optional[Sequence[int]] = None,
) -> Op:
    """Add (or re-describe) the link ``source -> target``."""
    op = {"op": "link", "from": source, "to": target, "relation": relation, "weight": float(weight)}
    return _planned(op, label, reason, sources)


def unlink(source: str, target: str, *, label: str = "unlink", reason: str = "", sources=None) -> Op:
    """Remove the link ``source -> target``."""
    return _planned({"op": "unlink", "from": source, "to": target}, label, reason, sources)


def adjust_strength(
    id: str, delta: float, evidence_delta: int = 0, *, label: str = "boost", reason: str = "", sources=None
) -> Op:
    """Add ``delta`` to the strength (clamped to [-1, 1]) and
    ``evidence_delta`` to the evidence of record ``id``."""
    op = {"op": "adjust_strength", "id": id, "delta": float(delta), "evidence_delta": int(evidence_delta)}
    return _planned(op, label, reason, sources)


def set_utility(id: str, value: float, *, label: str = "q_update", reason: str = "", sources=None) -> Op:
    """Set the utility (Q value) of record ``id``."""
    return _planned({"op": "set_utility", "id": id, "value": float(value)}, label, reason, sources)


def merge(
    into: str,
    absorbed: Sequence[str],
    text: Optional[str] = None,
    strength: Optional[float] = None,
    *,
    label: str = "merge",
    reason: str = "",
    sources=None,
) -> Op:
    """Merge ``absorbed`` records into ``into`` (evidence summed, links
    re-pointed, the absorbed removed)."""
    op = {"op": "merge", "into": into, "sources": list(absorbed), "text": text, "strength": strength}
    return _planned(op, label, reason, sources)


def forget(id: str, *, label: str = "forget", reason: str = "", sources=None) -> Op:
    """Remove record ``id`` and every link to it."""
    return _planned({"op": "forget", "id": id}, label, reason, sources)


def set_status(id: str, status: str, *, label: str = "status", reason: str = "", sources=None) -> Op:
    """Set the governance status of record ``id``: ``active``,
    ``provisional`` or ``promoted``."""
    return _planned({"op": "set_status", "id": id, "status": status}, label, reason, sources)


__all__: List[str] = [
    "KINDS",
    "adjust_strength",
    "create",
    "forget",
    "item_ns",
    "link",
    "merge",
    "set_status",
    "set_utility",
    "unlink",
    "update_fields",
    "user_ns",
]
