"""When a router refits its head, and how one router's fit reaches the others.

- `FitBudget`: head fits stay within ``refit_cpu_share`` of one core over any minute. A fit
  is allowed when the CPU of the fits that ended in the last minute plus what this one is
  expected to cost fit in the budget; a fit *due* while memories keep changing must also
  leave room for one more, so the fit that follows the last change (the load stopped) can
  run at once, and the mesh is idle a few seconds after its load.
- ``route.fitted``: the router that fitted announces the result (genre means and the head's
  arrays, the head in float16; the fitter installs the same rounded head) with a digest of
  each agent's registration, so the other routers install the same head instead of fitting
  the same memories again. A fit travels in parts of at most `ROWS_PER_PART` agents (an
  event stays under the codec's 1 MiB), put together again by `FitParts`. A router defers
  to fits from a router whose id sorts before its own while those keep coming
  (`FitLeader`); the first router fits, and when it stops announcing, the next one takes
  over.
"""

from __future__ import annotations

import base64
import hashlib
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mesh.router.fitting import FitResult, Head

__all__ = [
    "FITTED_EVENT",
    "FitBudget",
    "FitLeader",
    "FitParts",
    "decode_fit",
    "encode_fit",
    "registration_digest",
    "rounded",
]

#: a head one router fitted, announced to the others (`encode_fit`)
FITTED_EVENT = "route.fitted"
#: the window the CPU share is enforced over
WINDOW_S = 60.0
#: agents' head rows per ``route.fitted`` part (384 float16 each: ~0.5 MB of base64)
ROWS_PER_PART = 500

F32 = NDArray[np.float32]


class FitBudget:
    """The CPU-seconds of recent fits against ``share`` of one core over `WINDOW_S`."""

    def __init__(self, share: float, window_s: float = WINDOW_S) -> None:
        self.share = share
        self.window_s = window_s
        #: (monotonic end, CPU-seconds) of the fits that ended within the window
        self._fits: deque[tuple[float, float]] = deque()

    @property
    def limit_s(self) -> float:
        return self.share * self.window_s

    def spent(self, now: float) -> float:
        while self._fits and self._fits[0][0] <= now - self.window_s:
            self._fits.popleft()
        return sum(cpu for _, cpu in self._fits)

    def allows(self, now: float, need_s: float) -> bool:
        """Whether fits costing `need_s` CPU-seconds may start at `now` (always when the
        window is empty: a fit dearer than the whole budget runs once a window)."""
        return self.spent(now) + need_s <= self.limit_s or not self._fits

    def record(self, end: float, cpu_s: float) -> None:
        self._fits.append((end, cpu_s))


class FitLeader:
    """Which router fits: this one, unless a router of a smaller id announced a fit lately."""

    def __init__(self, own_id: str) -> None:
        self.own_id = own_id
        self._defer_until = 0.0

    def heard(self, sender: str, now: float, lease_s: float) -> None:
        """A fit arrived from `sender`, which promises its next within `lease_s`."""
        if sender < self.own_id:
            self._defer_until = max(self._defer_until, now + lease_s)

    def fits_here(self, now: float) -> bool:
        return now >= self._defer_until


def registration_digest(signature: object) -> str:
    """A short digest of a registration's signature (the keeper's `_registered` values)."""
    return hashlib.blake2b(repr(signature).encode(), digest_size=8).hexdigest()


def _pack(array: F32, dtype: str = "<f4") -> dict[str, Any]:
    data = np.ascontiguousarray(array, dtype).tobytes()
    return {"shape": list(array.shape), "dtype": dtype, "data": base64.b64encode(data).decode()}


def _unpack(packed: Mapping[str, Any]) -> F32:
    raw = np.frombuffer(base64.b64decode(packed["data"]), str(packed.get("dtype", "<f4")))
    out: F32 = raw.astype(np.float32).reshape([int(s) for s in packed["shape"]])
    return out


def _half(array: F32) -> F32:
    out: F32 = array.astype("<f2").astype(np.float32)
    return out


def rounded(result: FitResult) -> FitResult:
    """`result` with its head rounded as ``route.fitted`` carries it (float16)."""
    head = result.head
    if head is None:
        return result
    return replace(
        result,
        head=Head(
            _half(head.hidden_weights), _half(head.hidden_biases), _half(head.weights), head.biases
        ),
    )


def encode_fit(
    result: FitResult, digests: Mapping[str, str | None], rows_per_part: int = ROWS_PER_PART
) -> list[dict[str, Any]]:
    """The data of the ``route.fitted`` events of `result`: its agents in order with
    `digests` (None: the registration changed during the fit, no router installs that row),
    the means and hidden layers in the first part, the agents' rows split over the parts."""
    head = result.head
    agents = [[agent_id, digests.get(agent_id)] for agent_id in result.agents]
    starts = range(0, max(len(agents), 1), rows_per_part)
    parts: list[dict[str, Any]] = []
    for part, start in enumerate(starts):
        stop = start + rows_per_part
        data: dict[str, Any] = {"part": part, "parts": len(starts), "agents": agents[start:stop]}
        if head is not None:
            data["weights"] = _pack(head.weights[start:stop], "<f2")
            data["biases"] = _pack(head.biases[start:stop])
        if part == 0:
            data["capability_mean"] = _pack(result.capability_mean)
            data["request_mean"] = _pack(result.request_mean)
            data["head"] = head is not None
            if head is not None:
                data["hidden_weights"] = _pack(head.hidden_weights, "<f2")
                data["hidden_biases"] = _pack(head.hidden_biases, "<f2")
        parts.append(data)
    return parts


class FitParts:
    """Puts the parts of one sender's fit together (parts of a sender arrive in order)."""

    def __init__(self) -> None:
        self._parts: dict[str, list[Mapping[str, Any]]] = {}

    def add(self, sender: str, data: Mapping[str, Any]) -> dict[str, Any] | None:
        """The whole fit once its last part arrived, else None. Raises KeyError or
        ValueError on a malformed part."""
        part, parts = int(data["part"]), int(data["parts"])
        have = [] if part == 0 else self._parts.get(sender, [])
        if len(have) != part:  # a part went missing: wait for the next fit
            self._parts.pop(sender, None)
            return None
        have = [*have, data]
        if len(have) < parts:
            self._parts[sender] = have
            return None
        self._parts.pop(sender, None)
        whole = dict(have[0])
        whole["agents"] = [a for p in have for a in p["agents"]]
        if whole["head"]:
            for name in ("weights", "biases"):
                arrays = [_unpack(p[name]) for p in have]
                whole[name] = _pack(np.concatenate(arrays))
        return whole


def decode_fit(
    data: Mapping[str, Any], version: int, registered: Mapping[str, tuple[str, int]]
) -> FitResult:
    """The `FitResult` of a whole ``route.fitted`` fit (`FitParts.add`) for this router.

    `registered` maps each local agent to its registration digest and its entry's
    `registered` counter: a row is installed only where the digests agree (-1 elsewhere,
    which no entry has). Raises KeyError or ValueError on a malformed event.
    """
    agents: dict[str, int] = {}
    for agent_id, digest in data["agents"]:
        local = registered.get(str(agent_id))
        agents[str(agent_id)] = local[1] if local is not None and local[0] == digest else -1
    head = (
        Head(
            hidden_weights=_unpack(data["hidden_weights"]),
            hidden_biases=_unpack(data["hidden_biases"]),
            weights=_unpack(data["weights"]),
            biases=_unpack(data["biases"]),
        )
        if data["head"]
        else None
    )
    if head is not None and len(head.weights) != len(agents):
        raise ValueError(f"route.fitted: {len(head.weights)} head rows for {len(agents)} agents")
    return FitResult(
        version,
        agents,
        _unpack(data["capability_mean"]),
        _unpack(data["request_mean"]),
        head,
    )
