"""The observer (docs/design.md section 8): traces, decision log, per-agent figures and alerts.

Modules, one job each: `feed` (the queue on the events exchange), `store` (per-trace
history in Redis), `journal` (JSON-lines logs), `figures` (per-agent figures), `windows`
and `alerts` (pure alert rules), `tree` (a trace's hops, for `mesh trace`) and `service`
(`Observer`, which runs them together).

Several observers: one queue per observer *name*
-----------------------------------------------
Each observer consumes its own durable queue, ``<ns>.observer.<user>.<name>``
(`Settings.observer_name`, default ``main``), so observers of different names each get
every event: their figures, windows and logs are complete, and one can be restarted or
lag without the other missing anything. A queue shared by competing observers would
give each only a sample of the stream: rates would still roughly hold, but a trace's
revisits, an agent's bounces and the logs would be split across processes and go unseen.
Observers of the *same* name do share that queue (competing consumers, the queue survives
a restart of its observer and keeps its backlog); run one per name for the alerts and
logs to be whole.

What two observers write twice costs nothing: a trace's events are stored as a sorted
set of their bytes, so the second copy of an event adds nothing. Alerts are judged by
each observer for itself and carry its ``observer_id``; observers ignore the alerts of
observers on the way in.
"""

from mesh.observer.alerts import Alert, AlertBook, AlertRules, QueueWatch, Thresholds
from mesh.observer.figures import AgentFigures, Figures
from mesh.observer.service import Observer
from mesh.observer.tree import Hop, Trace, build_trace

__all__ = [
    "AgentFigures",
    "Alert",
    "AlertBook",
    "AlertRules",
    "Figures",
    "Hop",
    "Observer",
    "QueueWatch",
    "Thresholds",
    "Trace",
    "build_trace",
]
