"""Type stubs of the native module ``evomem._evomem`` (built from
``crates/evomem-py`` by maturin). Use the wrappers in ``evomem``."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

__version__: str
ROLES: List[Tuple[str, str, str]]
"""The LLM roles ``Ctx.role`` calls: ``(name, the role's own name, what its input holds)``."""

class DataError(ValueError):
    """A dataset could not be loaded or built: the message names the file or
    row, and the field."""

class EvalError(RuntimeError):
    """An evaluation could not be run or completed."""

class PolicyError(EvalError):
    """A policy failed; the message names the policy and the method (for a
    Python policy, with the Python exception and traceback)."""

class LeakError(EvalError):
    """The leak canary caught a policy writing memory from an interaction
    the protocol had not shown it."""

class Dataset:
    """A loaded dataset: users, items (with metadata) and interactions in
    replay order."""

    @staticmethod
    def from_interactions(rows: Any, items: Optional[Dict[Any, Dict[str, Any]]] = None, name: str = "python") -> Dataset:
        """Build a dataset from ``(user, item, timestamp[, rating])`` rows
        (or dicts with those keys and an optional ``split``: ``train``,
        ``valid`` or ``test``) and optional item metadata ``{token: {"title",
        "categories", "text", "attributes"}}``. Checked by the JSONL loader's
        rules; a bad value raises :class:`DataError` naming ``rows[i]`` or
        ``items[token]`` and the field."""
    @property
    def name(self) -> str:
        """The dataset's name."""
    @property
    def n_users(self) -> int:
        """Number of users."""
    @property
    def n_items(self) -> int:
        """Number of items."""
    @property
    def n_interactions(self) -> int:
        """Number of interactions."""
    @property
    def path(self) -> Optional[str]:
        """The folder or file it was loaded from (None for rows)."""
    @property
    def files(self) -> Dict[str, str]:
        """SHA-256 of every file read, by file name."""
    def users(self) -> List[str]:
        """User tokens, by dense id."""
    def items(self) -> List[str]:
        """Item tokens, by dense id."""
    def interactions(self) -> List[Tuple[str, str, int, Optional[float], int]]:
        """Interactions in replay order: ``(user, item, timestamp, rating, time)``."""

class Ctx:
    """What a Python policy may read during a call."""

    @property
    def now(self) -> int:
        """The logical time of the call."""
    @property
    def model_id(self) -> str:
        """The embedder's model id."""
    def embed(self, texts: List[str]) -> List[List[float]]:
        """Embed texts with the run's embedder (L2-normalised)."""
    def item(self, token: str) -> Dict[str, Any]:
        """An item's metadata (token, title, categories, text, attributes)."""
    def item_text(self, token: str) -> str:
        """An item's full text, as the Rust families embed it."""
    def records(self, namespace: str) -> List[Dict[str, Any]]:
        """The records of a namespace (``user:<token>``), as dicts."""
    def record(self, id: str) -> Optional[Dict[str, Any]]:
        """One record by id, or None."""
    def memory_len(self) -> int:
        """The number of records in the policy's memory."""
    def rank(
        self,
        user: str,
        candidates: List[str],
        profile: Optional[str] = None,
        entries: Optional[List[str]] = None,
        scores: Optional[List[float]] = None,
    ) -> List[float]:
        """Run the ``rank`` LLM role through the policy's hub (offline: the
        documented embedding ranker): one score per candidate. A role error
        that must fail the run fails it even if the exception is caught.
        The same as ``role("rank", {...})["scores"]``."""
    def role(self, name: str, input: Dict[str, Any], user: Optional[str] = None) -> Dict[str, Any]:
        """Run the LLM role ``name`` (a name of :data:`ROLES`: ``extract``,
        ``synthesize``, ``plan``, ``link``, ``evolve``, ``rank``, ...; or the
        role's own name, ``mars_extract``) on ``input``, a dict in the JSON
        shape of the role's input type, through the policy's hub (accounting,
        record/replay cache, repair then offline fallback). Returns the
        role's output as a dict. Raises ``ValueError`` naming the role and
        the field for an unknown name or a malformed input, and
        ``RuntimeError`` for a role error that must fail the run; such an
        error fails the run even if the policy catches the exception.
        ``user`` (default: the input's ``user``) is accounted the call."""

class Event:
    """An observed interaction."""

    user: str
    item: str
    time: int
    """Logical time: cite it in an op's ``sources``."""
    timestamp: int
    rating: Optional[float]

class Query:
    """A ranking decision (never its target)."""

    decision_id: int
    user: str
    at: int
    candidates: List[str]
    instruction: Optional[str]

class FeedbackEvent:
    """The outcome of an earlier decision (evolving protocol)."""

    decision_id: int
    user: Optional[str]
    decided_at: int
    observed_at: int
    """The logical time of the revealed interaction: cite it in ``sources``."""
    reward: float
    success: Optional[bool]
    item: Optional[str]
    value: Optional[float]

def load(path: str, format: Optional[str] = None) -> Dataset:
    """Load a dataset with the Rust loaders."""

def evaluate(
    data: Dataset,
    policies: List[Any],
    out: str,
    protocol: str = "retrospective",
    negatives: int = 9,
    seed: int = 42,
    target: str = "test",
    users: str = "all",
    memory_users: str = "selected",
    sampling: str = "uniform",
    fixed_candidates: str = "as-given",
    tick: int = 1000,
    ops_log: bool = True,
    models_dir: Optional[str] = None,
    threads: int = 0,
    embed_cache: str = "auto",
    return_memory: bool = False,
    llm: str = "offline",
    llm_roles: Optional[Dict[str, str]] = None,
    llm_cache: str = "off",
    llm_cache_path: Optional[str] = None,
) -> Tuple[str, Dict[str, List[Dict[str, Any]]]]:
    """Run the policies and write the run folder ``out``; the summary as
    JSON text and, with ``return_memory``, each Python policy's memory."""

def compare_per_user(a: str, b: str, resamples: int = 1000, level: float = 0.95, seed: int = 42) -> str:
    """Paired-bootstrap deltas of two ``per_user.jsonl`` texts, as JSON."""

def replay_ops(policy_dir: str) -> List[Dict[str, Any]]:
    """Replay a policy folder's op log into an empty memory; its records."""

def embed_raw(texts: Sequence[str], models_dir: Optional[str] = None, threads: int = 0) -> Tuple[str, int, bytes, Optional[str]]:
    """Embed texts: ``(model_id, dim, little-endian f32 bytes, notice)``."""
