"""Local rules: where a client sends a task itself when no router consumes ingress.

A rule is a regular expression and an agent id: the first rule whose expression is found
in the task's capability text (case-insensitively) names the agent, and `MeshClient`
publishes the task straight to that agent's queue, marked ``route.strategy="local_rule"``.
Rules are the caller's last resort while the routers are down, never a second router:
they see only the text (no required_tags, no load, no agent health).

Given as a mapping (``MeshClient(local_rules={"refund|退款": "support.refunds"})``) or as
a file (``MESH_LOCAL_RULES=/etc/mesh/local-rules``), one rule per line, in order::

    # pattern -> agent_id   (blank lines and lines starting with # are skipped)
    refund|退款 -> support.refunds
    invoice -> billing

The pattern is everything before the last ``->``, the agent id what follows it.

Pure apart from `from_file`, which reads the file (`rules_for`, called by
`MeshClient.start()`, never at import).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mesh.errors import ConfigError

if TYPE_CHECKING:
    from mesh.config import Settings
    from mesh.topology import Topology

#: what an agent id may be (the envelope's ``target`` field accepts the same)
_AGENT_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
#: separates a file line's pattern from its agent id
ARROW = "->"


@dataclass(frozen=True, slots=True)
class LocalRule:
    pattern: re.Pattern[str]
    agent_id: str


@dataclass(frozen=True, slots=True)
class LocalRules:
    """Rules in the order given; empty: a client without them fails with `NoRouter`."""

    rules: tuple[LocalRule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)

    @property
    def targets(self) -> tuple[str, ...]:
        """The agents the rules name, each once, in rule order."""
        return tuple(dict.fromkeys(rule.agent_id for rule in self.rules))

    def match(self, text: str) -> str | None:
        """The agent of the first rule found in `text`, or None."""
        for rule in self.rules:
            if rule.pattern.search(text):
                return rule.agent_id
        return None

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, str], *, source: str = "local_rules") -> LocalRules:
        """Rules from ``{pattern: agent_id}`` (in the mapping's order).

        Raises:
            ConfigError: a pattern does not compile or an agent id is not one; the message
                names `source`.
        """
        return cls(tuple(_rule(p, a, source) for p, a in mapping.items()))

    @classmethod
    def from_text(cls, text: str, *, source: str = "local rules") -> LocalRules:
        """Rules from the file format above; `source` names the file in errors."""
        rules = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            pattern, arrow, agent_id = line.rpartition(ARROW)
            if not arrow or not pattern.strip():
                raise ConfigError(
                    f"{source} line {number}: {line!r} is not `pattern {ARROW} agent_id`"
                )
            rules.append(_rule(pattern.strip(), agent_id.strip(), f"{source} line {number}"))
        return cls(tuple(rules))

    @classmethod
    def from_file(cls, path: Path) -> LocalRules:
        """Rules from the file `path` (``MESH_LOCAL_RULES``).

        Raises:
            ConfigError: the file cannot be read or a line does not parse.
        """
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"MESH_LOCAL_RULES={str(path)!r} cannot be read ({exc}): point it at a file "
                f"of `pattern {ARROW} agent_id` lines, or unset it"
            ) from None
        return cls.from_text(text, source=f"MESH_LOCAL_RULES {str(path)!r}")


def rules_for(
    given: Mapping[str, str] | LocalRules | None, settings: Settings, topology: Topology
) -> LocalRules:
    """The rules given, else the file ``MESH_LOCAL_RULES`` names; refused under access control.

    Raises:
        ConfigError: a rule does not parse, or there are rules under access control (the
            message names the grant a client lacks).
    """
    source = "local_rules"
    if isinstance(given, LocalRules):
        rules = given
    elif given is not None:
        rules = LocalRules.from_mapping(given)
    elif settings.local_rules is not None:
        rules, source = LocalRules.from_file(settings.local_rules), "MESH_LOCAL_RULES"
    else:
        rules = LocalRules()
    if rules and settings.access_control:
        keys = ", ".join(topology.agent_routing_key(a) for a in rules.targets)
        raise ConfigError(
            f"{source} cannot be followed under access control: a client's user may "
            f"publish to {topology.ingress} only, not to {topology.capabilities} "
            f"(keys {keys}), and `mesh access provision` grants no more; unset {source}"
        )
    return rules


def _rule(pattern: str, agent_id: str, source: str) -> LocalRule:
    if not _AGENT_ID.match(agent_id):
        raise ConfigError(
            f"{source}: {agent_id!r} is not an agent id (letters, digits and _.:@- only)"
        )
    try:
        compiled = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ConfigError(
            f"{source}: pattern {pattern!r} is not a regular expression ({exc})"
        ) from None
    return LocalRule(compiled, agent_id)


__all__ = ["LocalRule", "LocalRules", "rules_for"]
