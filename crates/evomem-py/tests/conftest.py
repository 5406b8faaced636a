"""Shared fixtures of the Python tests: data paths (found as the Rust
tests find them), a small synthetic dataset, the `evomem` binary, and a
real `evomem serve` on a free port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import evomem

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "crates" / "evomem-eval" / "tests" / "fixtures"


def shared_dataset(name: str) -> Path:
    """A real dataset, looked for where `evomem_kit::testing::shared_dataset`
    looks: $EVOMEM_SHARED_DATA, ../shared/data beside the repository, then
    what scripts/fetch-data.sh fetched. Missing under CI: the test fails;
    otherwise it is skipped loudly and logged to $EVOMEM_SKIP_LOG."""
    places = []
    if os.environ.get("EVOMEM_SHARED_DATA"):
        places.append(Path(os.environ["EVOMEM_SHARED_DATA"]))
    places.append(REPO.parent / "shared" / "data")
    fetched = os.environ.get("EVOMEM_DATA_DIR") or (
        os.path.join(os.environ["HOME"], ".cache", "evomem", "data") if os.environ.get("HOME") else None
    )
    if fetched:
        places.append(Path(fetched))
    for root in places:
        if (root / name).is_dir():
            return root / name
    tried = ", ".join(str(p / name) for p in places)
    if os.environ.get("CI"):
        pytest.fail(f"dataset `{name}` is missing (CI is set); looked in {tried}")
    log = os.environ.get("EVOMEM_SKIP_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"pytest:{name}\n")
    pytest.skip(f"!!! dataset `{name}` is missing (looked in {tried}) !!!")


@pytest.fixture(scope="session")
def ml100k() -> Path:
    return shared_dataset("ml-100k")


GENRES = ["Action", "Comedy", "Drama", "Horror", "Jazz", "Sci-Fi"]


def synthetic_rows(users: int = 12, per_user: int = 8):
    """Deterministic rows: each user favours two genres."""
    rows = []
    for u in range(users):
        for k in range(per_user):
            g = (u + k % 2) % len(GENRES)
            item = f"i{g}_{(u * 7 + k * 3) % 5}"
            rows.append((f"u{u}", item, 1000 + u + 50 * k, float(1 + (u + k) % 5)))
    return rows


def synthetic_items():
    return {
        f"i{g}_{j}": {"title": f"{GENRES[g]} film {j}", "categories": [GENRES[g]]}
        for g in range(len(GENRES))
        for j in range(5)
    }


@pytest.fixture(scope="session")
def toy() -> evomem.Dataset:
    return evomem.Dataset.from_interactions(synthetic_rows(), items=synthetic_items(), name="toy")


@pytest.fixture(scope="session")
def evomem_bin() -> Path:
    """The `evomem` binary: $EVOMEM_BIN, else target/debug/evomem (scripts/test.sh builds it)."""
    env = os.environ.get("EVOMEM_BIN")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    for p in [Path(env)] if env else [target / "debug" / "evomem", target / "release" / "evomem"]:
        if p.is_file():
            return p
    found = shutil.which("evomem")
    if found:
        return Path(found)
    pytest.fail("the evomem binary is missing: `cargo build -p evomem` or set EVOMEM_BIN")


@pytest.fixture()
def serve(evomem_bin, tmp_path):
    """A real `evomem serve` (hashing embedder, port 0) with one tenant; yields (url, key)."""
    data = tmp_path / "serve-data"
    key = subprocess.run(
        [str(evomem_bin), "serve", "keys", "add", "--tenant", "pytest", "--data-dir", str(data)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    env = dict(os.environ, EVOMEM_SERVE__RATE_LIMIT_PER_S="0")
    proc = subprocess.Popen(
        [str(evomem_bin), "serve", "--embedder", "hashing", "--bind", "127.0.0.1:0", "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert "http://" in line, f"no address in {line!r}"
        addr = line.split("http://", 1)[1].split()[0]
        yield f"http://{addr}", key
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
