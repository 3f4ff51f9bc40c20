"""`Refusal`: why the mesh does not believe a message (one code, one sentence)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a message is not accepted. `answer`: the sender may be told (its reply route is
    its own); otherwise telling it would let it aim the answer at someone else."""

    code: str
    message: str
    answer: bool = False


__all__ = ["Refusal"]
