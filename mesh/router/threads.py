"""How many threads numpy's BLAS may use in a router process.

OpenBLAS starts a worker per core and lets idle workers spin between calls: under load, a
router whose head refits ran matrix products on two threads burned a second core that no
measurement of the fit thread saw (`IndexKeeper` budgets fits by that thread's CPU time).
One thread keeps a fit's cost where it is measured; decisions are single-vector products,
too small to gain from more. `threadpoolctl` (part of the ``router`` extra) sets the limit
at run time, after numpy was imported.
"""

from __future__ import annotations

import logging

from mesh.distribution import extra_hint

logger = logging.getLogger(__name__)


def limit_blas_threads(threads: int | None) -> bool:
    """Cap numpy's BLAS at `threads` for this process (None: leave it); False if unable."""
    if threads is None:
        return False
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        logger.warning(
            "threadpoolctl is not installed: numpy's BLAS threads are not limited "
            f"({extra_hint('router')})"
        )
        return False
    threadpool_limits(limits=threads, user_api="blas")
    logger.info("BLAS threads limited to %d", threads)
    return True


__all__ = ["limit_blas_threads"]
