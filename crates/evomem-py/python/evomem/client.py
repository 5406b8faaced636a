"""A client for ``evomem serve``, in pure Python (standard library only).

Every method is one HTTP call to the routes in ``docs/service-api.md`` and
returns the decoded JSON answer. An error answer raises
:class:`ServiceError` carrying the service's stable error ``code`` (e.g.
``unknown_key``, ``not_found``, ``invalid_request``), the HTTP
``status`` and the message; a failed connection raises it with code
``transport`` and status 0.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union


class ServiceError(Exception):
    """An error answer of ``evomem serve``: ``code`` (stable), ``status``
    (HTTP) and ``message``."""

    def __init__(self, code: str, status: int, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.code = code
        self.status = status
        self.message = message


class Client:
    """``Client("http://127.0.0.1:7700", key)``: the tenant of ``key``."""

    def __init__(self, url: str, key: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.key = key
        self.timeout = timeout

    # -- plumbing -------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: Optional[Mapping[str, Any]] = None,
        query: Optional[Mapping[str, Any]] = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        url = self.url + path
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(
                {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in q.items()}
            )
        data = None
        headers = {"Authorization": f"Bearer {self.key}", "Accept": "application/json"}
        if body is not None:
            data = json.dumps({k: v for k, v in body.items() if v is not None}).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)["error"]
                raise ServiceError(err.get("code", "unknown"), e.code, err.get("message", "")) from None
            except (ValueError, KeyError, TypeError):
                raise ServiceError("http", e.code, raw.decode("utf-8", "replace")) from None
        except urllib.error.URLError as e:
            raise ServiceError("transport", 0, str(e.reason)) from None
        return json.loads(raw) if raw else None

    @staticmethod
    def _seg(s: str) -> str:
        return urllib.parse.quote(str(s), safe="")

    # -- memories -------------------------------------------------------
    def add(
        self,
        user_id: str,
        memories: Sequence[Union[str, Mapping[str, Any]]],
        idempotency_key: Optional[str] = None,
    ) -> List[Dict[str, Any]]:
        """Add memories (texts, or dicts with ``text`` and ``metadata``);
        returns the created memories."""
        items = [{"text": m} if isinstance(m, str) else dict(m) for m in memories]
        r = self._call("POST", "/v1/memories", {"user_id": user_id, "memories": items}, idempotency_key=idempotency_key)
        return r["memories"]

    def search(
        self,
        user_id: str,
        query: str,
        k: Optional[int] = None,
        filter: Optional[Mapping[str, Any]] = None,
        min_score: Optional[float] = None,
    ) -> List[Dict[str, Any]]:
        """Top-``k`` memories of ``user_id`` for ``query``: ``[{"memory", "score"}]``."""
        body = {"user_id": user_id, "query": query, "k": k, "filter": filter, "min_score": min_score}
        return self._call("POST", "/v1/memories/search", body)["results"]

    def get(self, memory_id: str) -> Dict[str, Any]:
        """One memory by id."""
        return self._call("GET", f"/v1/memories/{self._seg(memory_id)}")

    def update(
        self,
        memory_id: str,
        text: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]:
        """Change a memory's text and/or metadata."""
        return self._call("PATCH", f"/v1/memories/{self._seg(memory_id)}", {"text": text, "metadata": metadata})

    def delete(self, memory_id: str, hard: bool = False) -> Any:
        """Delete a memory (``hard=True`` also removes it from the log)."""
        return self._call("DELETE", f"/v1/memories/{self._seg(memory_id)}", query={"hard": hard or None})

    def history(self, memory_id: str) -> Any:
        """The ops that made a memory, with their provenance."""
        return self._call("GET", f"/v1/memories/{self._seg(memory_id)}/history")

    def memories(
        self,
        user_id: str,
        as_of: Optional[int] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Any:
        """One page of a user's memories (``limit``, default 100, in id
        order), now or as of ``as_of`` (ms since the epoch); the answer's
        ``next_cursor``, passed as ``cursor``, gives the next page.
        :meth:`all_memories` follows the cursors."""
        q = {"as_of": as_of, "limit": limit, "cursor": cursor}
        return self._call("GET", f"/v1/users/{self._seg(user_id)}/memories", query=q)

    def all_memories(self, user_id: str, as_of: Optional[int] = None, page: int = 1000) -> Iterator[Dict[str, Any]]:
        """Every memory of a user, page by page (``page`` per request)."""
        cursor: Optional[str] = None
        while True:
            r = self.memories(user_id, as_of=as_of, limit=page, cursor=cursor)
            yield from r["memories"]
            cursor = r.get("next_cursor")
            if not cursor:
                return

    def delete_user(self, user_id: str) -> Dict[str, Any]:
        """Delete everything of a user (verified by the service)."""
        return self._call("DELETE", f"/v1/users/{self._seg(user_id)}")

    # -- the loop -------------------------------------------------------
    def events(self, user_id: str, events: Sequence[Mapping[str, Any]], policy: Optional[str] = None) -> Dict[str, Any]:
        """Observe interactions (``{"item": {...}, "rating": ...}``)."""
        return self._call("POST", "/v1/events", {"user_id": user_id, "events": list(events), "policy": policy})

    def recommend(
        self,
        user_id: str,
        candidates: Sequence[Mapping[str, Any]],
        k: Optional[int] = None,
        instruction: Optional[str] = None,
        policy: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Rank ``candidates`` for ``user_id``: decision id, ranking, evidence."""
        body = {"user_id": user_id, "candidates": list(candidates), "k": k, "instruction": instruction, "policy": policy}
        return self._call("POST", "/v1/recommend", body)

    def feedback(
        self,
        decision_id: int,
        reward: Optional[float] = None,
        success: Optional[bool] = None,
        item_id: Optional[str] = None,
        objectives: Optional[Mapping[str, float]] = None,
    ) -> Dict[str, Any]:
        """The outcome of a decision."""
        body = {"decision_id": decision_id, "reward": reward, "success": success, "item_id": item_id, "objectives": objectives}
        return self._call("POST", "/v1/feedback", body)

    def health(self) -> bool:
        """True when ``/healthz`` answers."""
        req = urllib.request.Request(self.url + "/healthz")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False
