"""Open a model directory for evaluation: the reference model, tables in any placement."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engram.errors import EngramConfigError
from engram.model.directory import read_config
from engram.model.modeling import TinyEngramModel


def check_engram_model(model_dir: str | Path) -> None:
    """One clear error when ``model_dir`` is not a model with Engram layers."""
    cfg = read_config(model_dir)
    if not cfg.get("engram_layer_ids"):
        raise EngramConfigError(
            f"{model_dir} has no Engram layers (config.json lists no engram_layer_ids): "
            "there is nothing to switch off or scan"
        )


@contextmanager
def open_model(
    model_dir: str | Path,
    placement: str = "hbm",
    ssd_dir: str | Path | None = None,
    device: str = "cpu",
) -> Iterator[TinyEngramModel]:
    """The reference model on ``device`` with its tables in ``placement`` (``ssd`` files go to
    ``ssd_dir``, or to a temporary directory removed afterwards); tables closed on exit."""
    check_engram_model(model_dir)
    with tempfile.TemporaryDirectory(prefix="engram-eval-") as tmp:
        model = TinyEngramModel.from_pretrained(model_dir, placement, ssd_dir or tmp, device)
        try:
            yield model
        finally:
            model.close()
