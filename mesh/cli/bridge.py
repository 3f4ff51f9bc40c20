"""`mesh bridge http AGENT_ID --url URL`: an HTTP endpoint as a mesh agent (`mesh.bridge`).

The worker is an ordinary one (claims, fencing, retries, deadline, output checks); its
handler POSTs each task to the URL. The capability comes from ``--capability`` (and
``--example`` / ``--keyword`` / ``--tag``), from an A2A Agent Card (``--card FILE|URL``) or
from a registration file (``--registration FILE``: texts, tags and input/output contract).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mesh.cli._args import UsageError, int_range, positive_float
from mesh.cli._runner import run_serve
from mesh.cli.run import Stop, start_workers, with_metrics
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.distribution import extra_hint
from mesh.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser("bridge", help="run an agent that lives elsewhere: mesh bridge http ...")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND", help="http")
    h = kinds.add_parser(
        "http",
        help="forward each task to an HTTP endpoint (JSON in, JSON out)",
        description="A worker whose handler POSTs each task ({text, payload, task_id, "
        "trace_id, deadline_ms, attempt}) to --url with a traceparent header and the task's "
        "time left as the timeout; the endpoint's JSON object is the output. HTTP 5xx, 408, "
        "429 and timeouts are retried; other 4xx fail the task with code http_<status>.",
    )
    h.add_argument("agent_id", metavar="AGENT_ID", help="the agent's id")
    h.add_argument("--url", required=True, help="the endpoint tasks are POSTed to")
    h.add_argument("--capability", default=None, help="what the agent does (routing text)")
    h.add_argument(
        "--card",
        default=None,
        metavar="FILE|URL",
        help="an A2A Agent Card: its description and skills give the capability text, "
        "examples and keywords (added to --capability / --example / --keyword)",
    )
    h.add_argument(
        "--registration",
        default=None,
        metavar="FILE",
        help="a JSON object of the agent's registration: name, version, capability_text, "
        "examples, keywords, tags, supported_tasks, priority_bonus, input_schema, "
        "output_schema (over a --card's; the flags added to it)",
    )
    h.add_argument("--example", action="append", default=[], help="an example request (repeat)")
    h.add_argument("--keyword", action="append", default=[], help="a routing keyword (repeat)")
    h.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="a tag (repeat)")
    h.add_argument("--name", default=None, help="the agent's display name")
    h.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header sent with every request, e.g. 'Authorization: Bearer ...' (repeat)",
    )
    h.add_argument("--input-schema", default=None, metavar="FILE", help="JSON Schema of payloads")
    h.add_argument("--output-schema", default=None, metavar="FILE", help="JSON Schema of outputs")
    h.add_argument(
        "--concurrency", type=int_range(1), default=4, help="tasks in flight (default 4)"
    )
    h.add_argument("--instance-id", default=None, help="the instance's id (default: random)")
    h.add_argument(
        "--grace-s",
        type=positive_float,
        default=30.0,
        help="seconds in-flight tasks get to finish on shutdown (default 30)",
    )
    h.set_defaults(func=_http)


def _headers(lines: list[str]) -> dict[str, str]:
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header {line!r} is not 'NAME: VALUE'")
        headers[name.strip()] = value.strip()
    return headers


def _tags(pairs: list[str]) -> dict[str, str]:
    tags = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--tag {pair!r} is not KEY=VALUE")
        tags[key.strip()] = value.strip()
    return tags


def _schema(path: str | None, flag: str) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        schema = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{flag} {path}: {exc}") from None
    if not isinstance(schema, dict):
        raise ConfigError(f"{flag} {path}: a JSON Schema is a JSON object")
    return schema


def agent_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The `Agent` fields of the command line (a card's first, the flags added to them)."""
    from mesh.bridge.card import card_fields, load_card
    from mesh.bridge.registration import load_registration

    fields: dict[str, Any] = {}
    if args.card is not None:
        fields = card_fields(load_card(args.card), args.agent_id)
    if args.registration is not None:
        fields |= load_registration(args.registration, args.agent_id)
    texts = [t for t in (args.capability, fields.get("capability_text")) if t]
    if not texts:
        raise UsageError(
            "mesh bridge http needs --capability TEXT, --card FILE|URL or a --registration "
            "FILE with a capability_text"
        )
    fields |= {
        "capability_text": "\n".join(texts),
        "examples": [*fields.get("examples", []), *args.example],
        "keywords": list(dict.fromkeys([*fields.get("keywords", []), *args.keyword])),
        "tags": {**fields.get("tags", {}), **_tags(args.tag)},
        "max_concurrency": args.concurrency,
    }
    if args.name is not None:
        fields["name"] = args.name
    for key, path, flag in (
        ("input_schema", args.input_schema, "--input-schema"),
        ("output_schema", args.output_schema, "--output-schema"),
    ):
        if path is not None:
            fields[key] = _schema(path, flag)
    fields.pop("agent_id", None)
    return fields


def _http(args: argparse.Namespace, settings: Settings) -> int:
    try:
        from mesh.bridge import http_agent
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"mesh bridge needs httpx ({exc.name} is missing): {extra_hint('bridge')}"
        ) from None

    agent, bridge = http_agent(
        args.agent_id,
        url=args.url,
        headers=_headers(args.header),
        sample_ratio=settings.otel_sample_ratio,
        **agent_fields(args),
    )

    async def starter(conn: MeshConnection) -> Stop:
        stop = await with_metrics(
            settings,
            "worker",
            lambda m: start_workers(conn, [agent], args.instance_id, args.grace_s, m),
        )

        async def stop_all() -> None:
            try:
                await stop()
            finally:
                await bridge.aclose()

        return stop_all

    return run_serve(settings, f"mesh-bridge-{agent.agent_id}", starter)
