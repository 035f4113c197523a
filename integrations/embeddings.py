"""Sentence embeddings for capability search: WordLlama's 256-dimension model, whose weights and
tokenizer ship inside the wordllama wheel, so nothing is downloaded, ever.

Vectors are L2-normalised float32, stored as little-endian bytes, so a dot product is the cosine.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

DIMENSIONS = 256
_lock = threading.Lock()
_model: Any = None


def model() -> Any:
    """The model, loaded once per process on first use (about 0.1 s)."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                import wordllama
                from wordllama import WordLlama

                # WordLlama's own lookup misses the files inside the package; naming the package as the
                # cache directory finds the weights and the tokenizer there, and without downloads a
                # missing file is an error instead of a fetch from the network.
                _model = WordLlama.load(dim=DIMENSIONS, cache_dir=Path(wordllama.__file__).parent,
                                        disable_download=True)
    return _model


def embed(texts: list[str]) -> np.ndarray:
    """One normalised row per text, in one pass over the batch; a text without words gets zeros."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    vectors = np.asarray(model().embed(texts, batch_size=256), dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def to_bytes(vector: np.ndarray) -> bytes:
    return vector.astype("<f4").tobytes()


def from_bytes(data: bytes | memoryview | None) -> np.ndarray:
    """The stored vector; zeros for a row never embedded (or embedded by another model's size)."""
    if data is None or len(data) != DIMENSIONS * 4:
        return np.zeros(DIMENSIONS, dtype=np.float32)
    return np.frombuffer(data, dtype="<f4")
