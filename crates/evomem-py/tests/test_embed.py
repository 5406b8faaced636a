"""`evomem.embed`: the project's MiniLM as a numpy array."""

import numpy as np
import pytest

import evomem


def test_embed_returns_normalised_float32_rows():
    texts = ["a heist thriller in Los Angeles", "a gentle comedy about a wedding", "a heist thriller in Los Angeles"]
    v = evomem.embed(texts)
    assert isinstance(v, np.ndarray) and v.dtype == np.float32
    assert v.shape[0] == 3 and v.shape[1] in (384, 256)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert np.array_equal(v[0], v[2]), "the same text, the same vector"
    assert float(v[0] @ v[1]) < 0.99
    assert evomem.embed([]).shape == (0, v.shape[1])


def test_embed_is_minilm_where_the_model_is_fetched():
    from pathlib import Path
    import os

    model = Path(os.environ.get("HOME", "")) / ".cache" / "evomem" / "models" / "all-MiniLM-L6-v2"
    if not model.is_dir():
        if os.environ.get("CI"):
            pytest.fail("MiniLM is missing under CI (scripts/fetch-models.sh)")
        pytest.skip("MiniLM not fetched (scripts/fetch-models.sh)")
    v = evomem.embed(["hello world"])
    assert v.shape == (1, 384)
