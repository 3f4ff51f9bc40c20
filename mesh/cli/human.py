"""`mesh human list|take|answer`: a person answers the tasks no agent took (level 2).

A router hands a task to the human queue (``<ns>.human``) when no agent scored above the
threshold and no fallback agent is configured (``MESH_HUMAN_QUEUE``, on by default);
its caller got an interim ``queued_for_human`` Result. Here a person lists them, takes
one (nobody else can answer it then) and answers it: the Result (``route.strategy``
``human``) goes to the caller's reply queue if it still exists, and is stored with the
task either way (`mesh task TASK_ID`). Under access control, run it with the router's
credentials (only a router's user answers callers).

The ``list``, ``take`` and ``answer`` functions below are what the sub-commands print.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
from typing import Any

from mesh.cli._args import UsageError
from mesh.cli._broker import require_namespace
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.dispatch.human import Answered, HumanDesk, HumanTask
from mesh.dispatch.store import TaskStore
from mesh.messaging import Publisher, split_waiter
from mesh.schemas import now_ms
from mesh.schemas.codec import dumps

#: characters of a task's text `mesh human list` shows
TEXT_WIDTH = 60


def register(sub: Any) -> None:
    p = sub.add_parser("human", help="answer the tasks no agent took (the human queue)")
    hsub = p.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="list, take or answer"
    )
    ls = hsub.add_parser("list", help="the tasks waiting for a person, oldest first")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.set_defaults(func=_run)
    tk = hsub.add_parser("take", help="claim a task, so nobody else answers it")
    tk.add_argument("task_id", nargs="?", help="which task (default: the next in the queue)")
    tk.add_argument("--by", default=None, help="who takes it (default: your login name)")
    tk.add_argument("--json", action="store_true", help="print the task as JSON")
    tk.set_defaults(func=_run)
    an = hsub.add_parser("answer", help="complete a task with a person's answer")
    an.add_argument("task_id", help="the task (taken by you, or by nobody yet)")
    what = an.add_mutually_exclusive_group(required=True)
    what.add_argument("--output", metavar="JSON", help="the Result's output, a JSON object")
    what.add_argument("--text", help='a plain answer: the output is {"text": TEXT}')
    what.add_argument("--fail", metavar="REASON", help="fail the task (code human_declined)")
    an.add_argument("--by", default=None, help="who answers (default: your login name)")
    an.set_defaults(func=_run)


def _who(args: argparse.Namespace) -> str:
    return str(args.by or getpass.getuser())


def output_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The output an ``answer`` gives (None: ``--fail``).

    Raises:
        UsageError: ``--output`` is not a JSON object.
    """
    if args.text is not None:
        return {"text": args.text}
    if args.output is None:
        return None
    try:
        value = json.loads(args.output)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--output is not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict):
        raise UsageError('--output must be a JSON object, e.g. \'{"answer": "..."}\'')
    return value


def row(task: HumanTask, at_ms: int) -> str:
    """One line of `mesh human list`: id, age, best score, who took it, the text."""
    score = "-" if task.score is None else f"{task.score:.3f}"
    text = " ".join(task.envelope.capability.split())
    if len(text) > TEXT_WIDTH:
        text = text[: TEXT_WIDTH - 1] + "…"
    taken = task.taken_by or "-"
    return f"{task.task_id:34s} {_age(task.age_s(at_ms)):>6s} {score:>6s} {taken:12s} {text}"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


async def desk_of(conn: MeshConnection) -> tuple[HumanDesk, Publisher]:
    """A desk over a started publisher of `conn` (the caller closes the publisher)."""
    publisher = Publisher(conn)
    await publisher.start()
    return HumanDesk(
        publisher, TaskStore(conn.redis, conn.keys, conn.settings), conn.settings
    ), publisher


async def list_tasks(conn: MeshConnection, *, as_json: bool = False) -> str:
    """What ``mesh human list`` prints."""
    desk, publisher = await desk_of(conn)
    try:
        tasks = await desk.pending()
    finally:
        await publisher.close()
    at = now_ms()
    if as_json:
        return "\n".join(dumps(t.as_dict(at)).decode() for t in tasks)
    if not tasks:
        return f"nobody waits: {conn.topology.human} is empty"
    head = f"{'task_id':34s} {'age':>6s} {'score':>6s} {'taken_by':12s} text"
    return "\n".join([head, *(row(t, at) for t in tasks)])


async def take(
    conn: MeshConnection, task_id: str | None, who: str, *, as_json: bool = False
) -> str:
    """What ``mesh human take`` prints (raises `mesh.errors.HumanTaskError`)."""
    desk, publisher = await desk_of(conn)
    try:
        task = await desk.take(task_id, who)
    finally:
        await publisher.close()
    if task is None:
        return f"nobody waits: {conn.topology.human} is empty"
    if as_json:
        return dumps({**task.as_dict(now_ms()), "message": task.message}).decode()
    return "\n".join(
        [
            f"task {task.task_id} is yours, {who}",
            f"  text:    {task.envelope.capability}",
            f"  payload: {dumps(task.envelope.payload).decode()}",
            f"  why:     {task.message}",
            f"answer it: mesh human answer {task.task_id} --text '...' (or --output JSON)",
        ]
    )


async def answer(
    conn: MeshConnection,
    task_id: str,
    who: str,
    *,
    output: dict[str, Any] | None = None,
    error: str | None = None,
) -> tuple[str, Answered]:
    """What ``mesh human answer`` prints, and what it did (raises `HumanTaskError`)."""
    desk, publisher = await desk_of(conn)
    try:
        done = await desk.answer(task_id, who, output=output, error=error)
    finally:
        await publisher.close()
    lines = [f"task {task_id} {done.result.status} by {who}"]
    lines += [f"  sent to {split_waiter(w)[0]}" for w in done.delivered]
    lines += [
        f"  {split_waiter(w)[0]} is gone: the answer is kept with the task (mesh task {task_id})"
        for w in done.missing
    ]
    return "\n".join(lines), done


def _run(args: argparse.Namespace, settings: Settings) -> int:
    output = output_of(args) if args.action == "answer" else None

    async def go() -> int:
        async with await connect(settings, name="mesh-human") as conn:
            await require_namespace(conn, create=False, can_create=False)
            if args.action == "list":
                print(await list_tasks(conn, as_json=args.json))
            elif args.action == "take":
                print(await take(conn, args.task_id, _who(args), as_json=args.json))
            else:
                text, _ = await answer(
                    conn, args.task_id, _who(args), output=output, error=args.fail
                )
                print(text)
        return 0

    return asyncio.run(go())
