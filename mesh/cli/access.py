"""`mesh access provision|revoke`: one broker user and Redis ACL user per role (docs/security.md).

The role model is `mesh.access.roles`, the side effects `mesh.access.provision`. The
management API login is ``MESH_MANAGEMENT_URL`` (a user with the administrator tag), the
Redis login ``MESH_REDIS_URL`` (one allowed to run ``ACL``); the URLs printed for the roles
use the hosts of ``MESH_AMQP_URL`` and ``MESH_REDIS_URL``.

Safe by default: `provision` also creates the operator login (``--operator``), then takes
the password of the broker's ``guest`` away and switches Redis' ``default`` user off, and
says what it did and how to undo it. ``--keep-guest`` / ``--keep-redis-default`` leave
them on (development). Later runs log in as the operator (its ``operator.env`` block).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mesh.access.provision import (
    DEFAULT_GUEST,
    DEFAULT_OPERATOR,
    OPERATOR_REDIS_RULES,
    EnvBlock,
    Provisioner,
    ProvisionReport,
    env_text,
    write_env_dir,
    write_env_file,
)
from mesh.access.roles import (
    DEFAULT_DEAD_LETTER_MAX_BYTES,
    AccessScope,
    Role,
    RoleKind,
    build_plan,
    describe,
    roles_for,
    vhost_of,
)
from mesh.cli._args import UsageError, int_range
from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.topology import Topology

PROVISION_EXAMPLES = """\
examples:
  # a new vhost for one tenant: admin, router, registry, two agents, a client, an observer;
  # also the operator login, then guest and Redis' default user are switched off
  mesh access provision --vhost tenant1 --create-vhost \\
      --agent support.refunds --agent support.logistics --client web --observer ops \\
      --env-dir ./secrets/tenant1
  # from then on `mesh access` runs as the operator (MESH_MANAGEMENT_URL, MESH_REDIS_URL)
  set -a; . ./secrets/tenant1/operator.env; set +a
  # what it would create (roles, regexes, limits, Redis rules), touching nothing
  mesh access provision --vhost tenant1 --agent support.refunds --dry-run
  # again later: existing users keep their passwords (not printed again); add one agent
  mesh access provision --vhost tenant1 --agent support.refunds --agent billing
  # new passwords for every role
  mesh access provision --vhost tenant1 --agent support.refunds --rotate --env-file t1.env
  # development: leave guest/guest and Redis' passwordless default user on
  mesh access provision --vhost dev --create-vhost --keep-guest --keep-redis-default

Credentials are printed once, as MESH_NAMESPACE / MESH_AMQP_URL / MESH_REDIS_URL lines per
role under a '# mesh role ROLE' header (the operator's: MESH_MANAGEMENT_URL /
MESH_REDIS_URL), or written with mode 0600 (--env-file: one file; --env-dir: ROLE.env per
role, which `Settings.from_env` reads as a .env file).
"""

REVOKE_EXAMPLES = """\
examples:
  mesh access revoke --vhost tenant1                  # every provisioned user of the scope
  mesh access revoke --vhost tenant1 --agent billing  # only worker.billing
  mesh access revoke --vhost tenant1 --delete-vhost   # and the vhost with everything in it
  mesh access revoke --vhost tenant1 --dry-run        # list what would go

Only users `mesh access provision` created (tag mesh-access) are removed; the broker
closes their open connections. The operator, guest and the Redis `default` user are left
as they are (run as the operator once those are off).
"""


def register(sub: Any) -> None:
    p = sub.add_parser("access", help="provision or revoke per-role broker and Redis users")
    asub = p.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="provision or revoke"
    )
    pv = asub.add_parser(
        "provision",
        help="create the users, permissions, limits, policies and Redis ACLs of each role",
        epilog=PROVISION_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _scope_flags(pv)
    pv.add_argument(
        "--create-vhost", action="store_true", help="create the vhost when it does not exist"
    )
    pv.add_argument(
        "--rotate",
        action="store_true",
        help="issue new passwords to existing users too (default: they keep theirs)",
    )
    out = pv.add_mutually_exclusive_group()
    out.add_argument(
        "--env-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the credentials to this file (0600)",
    )
    out.add_argument(
        "--env-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="write ROLE.env per role (0600) in this dir",
    )
    pv.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (roles, regexes, limits, Redis rules) and touch nothing",
    )
    pv.add_argument(
        "--operator",
        metavar="NAME",
        default=DEFAULT_OPERATOR,
        help="the operator login this command runs as afterwards: broker administrator, "
        f"Redis ACL user with {' '.join(OPERATOR_REDIS_RULES[2:])} (default {DEFAULT_OPERATOR})",
    )
    pv.add_argument(
        "--guest",
        metavar="NAME",
        default=DEFAULT_GUEST,
        help=f"the broker's development login to disable (default {DEFAULT_GUEST})",
    )
    pv.add_argument(
        "--keep-guest",
        action="store_true",
        help="development: leave the guest login as it is (default: its password is taken away)",
    )
    pv.add_argument(
        "--keep-redis-default",
        action="store_true",
        help="development: leave Redis' `default` user on (default: switched off at the end)",
    )
    # the default now; still accepted so scripts written for it keep working
    pv.add_argument("--redis-default-off", action="store_true", help=argparse.SUPPRESS)
    pv.add_argument(
        "--max-connections",
        metavar="N",
        type=int_range(1),
        default=None,
        help="max-connections of every user (default: per role, see --dry-run)",
    )
    pv.add_argument(
        "--max-channels",
        metavar="N",
        type=int_range(1),
        default=None,
        help="max-channels of every user (default: per role)",
    )
    pv.add_argument(
        "--max-queues",
        metavar="N",
        type=int_range(1),
        default=None,
        help="max-queues limit of the vhost (removed only with the vhost)",
    )
    pv.add_argument(
        "--dead-letter-max-bytes",
        metavar="N",
        type=int_range(1024),
        default=DEFAULT_DEAD_LETTER_MAX_BYTES,
        help="max-length-bytes of each dead-letter queue, then reject-publish "
        f"(default {DEFAULT_DEAD_LETTER_MAX_BYTES})",
    )
    pv.set_defaults(func=_provision)
    rv = asub.add_parser(
        "revoke",
        help="remove the users, permissions, Redis ACLs and policy that provision created",
        epilog=REVOKE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _scope_flags(rv, roles_help="only these roles (default: every provisioned user)")
    rv.add_argument(
        "--delete-vhost", action="store_true", help="delete the vhost too (all its queues)"
    )
    rv.add_argument("--dry-run", action="store_true", help="list what would go, touch nothing")
    rv.set_defaults(func=_revoke)


def _scope_flags(p: argparse.ArgumentParser, roles_help: str = "") -> None:
    p.add_argument(
        "--vhost",
        metavar="NAME",
        default=None,
        help="the tenant's vhost (default: the vhost of MESH_AMQP_URL, '/' when it has none)",
    )
    p.add_argument(
        "--user-prefix",
        metavar="PREFIX",
        default=None,
        help="prefix of the user names (default '<namespace>:' in vhost '/', "
        "'<vhost>:<namespace>:' elsewhere; '' for bare role names)",
    )
    more = f"; {roles_help}" if roles_help else ""
    p.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="ID",
        help=f"a worker.ID user for agent ID (repeatable){more}",
    )
    p.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="NAME",
        help="a client.NAME user (repeatable)",
    )
    p.add_argument(
        "--observer",
        action="append",
        default=[],
        metavar="NAME",
        help="an observer.NAME user (repeatable)",
    )


def _scope(args: argparse.Namespace, settings: Settings) -> AccessScope:
    vhost = args.vhost if args.vhost is not None else vhost_of(settings)
    if not vhost:
        raise UsageError("--vhost must not be empty")
    return AccessScope(settings.namespace, vhost, args.user_prefix)


def _named_roles(args: argparse.Namespace) -> list[Role]:
    roles: list[Role] = []
    named: tuple[tuple[str, RoleKind, list[str]], ...] = (
        ("--agent", "worker", args.agent),
        ("--client", "client", args.client),
        ("--observer", "observer", args.observer),
    )
    for flag, kind, names in named:
        for name in dict.fromkeys(names):
            try:
                roles.append(Role(kind, name))
            except ConfigError as exc:
                raise UsageError(f"{flag}: {exc}") from None
    return roles


def _provision(args: argparse.Namespace, settings: Settings) -> int:
    scope = _scope(args, settings)
    named = _named_roles(args)
    roles = roles_for() + named
    plan = build_plan(
        scope,
        Topology.from_settings(settings),
        roles,
        max_connections=args.max_connections,
        max_channels=args.max_channels,
        dead_letter_max_bytes=args.dead_letter_max_bytes,
        max_queues=args.max_queues,
        observer_reads_requests=settings.observer_reads_requests,
    )
    if not args.operator:
        raise UsageError("--operator must not be empty")
    guest = None if args.keep_guest else args.guest
    if args.dry_run:
        describe(plan, print)
        print(f"operator {args.operator!r}: broker administrator, Redis {_rules()}")
        print(f"guest {args.guest!r}: {'kept' if guest is None else 'password taken away'}")
        print(f"Redis user 'default': {'kept' if args.keep_redis_default else 'switched off'}")
        return 0
    _check_writable(args)  # before guest goes: the operator's password must not be lost
    provisioner = Provisioner.from_settings(settings)
    try:
        report = provisioner.provision(
            plan,
            create_vhost=args.create_vhost,
            rotate=args.rotate,
            operator=args.operator,
            guest=guest,
            redis_default_off=not args.keep_redis_default,
        )
    finally:
        provisioner.close()
    if report.vhost_created:
        _note(f"created vhost {scope.vhost!r}")
    for r in report.results:
        if r.status == "kept":
            _note(
                f"role {r.grant.role.label}: user {r.grant.user!r} kept; its password is "
                "unchanged and not shown again (--rotate issues new ones)"
            )
        else:
            _note(f"role {r.grant.role.label}: user {r.grant.user!r} {r.status}")
    _note(f"policy {plan.policy.name} on the dead-letter queues")
    blocks: list[EnvBlock] = list(report.credentials())
    operator = report.operator
    if operator is not None and operator.credentials is not None:
        blocks.append(operator.credentials)
    where = _write(args, blocks)
    _lockdown_notes(args, report, where)
    return 0


def _rules() -> str:
    return " ".join(OPERATOR_REDIS_RULES[1:]) + ", no keys"


def _check_writable(args: argparse.Namespace) -> None:
    """Refuse an --env-file / --env-dir that cannot be written, before anything changed."""
    if args.env_dir is not None:
        target = args.env_dir
    elif args.env_file is not None:
        target = args.env_file.parent
    else:
        return
    while not target.exists() and target != target.parent:
        target = target.parent  # the missing folders are created (./secrets/tenant1)
    target = target if str(target) else Path(".")
    if not target.is_dir() or not os.access(target, os.W_OK):
        raise UsageError(f"cannot write credentials into {target}: choose a writable place")


def _write(args: argparse.Namespace, blocks: list[EnvBlock]) -> str:
    """Write or print the new credentials; where they went (for the notes)."""
    if not blocks:
        _note("no new credentials: every user existed already")
        return ""
    if args.env_file is not None:
        write_env_file(args.env_file, blocks)
        print(f"wrote {args.env_file} (mode 0600, {len(blocks)} roles)")
        return f"its block in {args.env_file}"
    if args.env_dir is not None:
        for path in write_env_dir(args.env_dir, blocks):
            print(f"wrote {path} (mode 0600)")
        return f"{args.env_dir / 'operator.env'}"
    sys.stdout.write(env_text(blocks))
    return "its block above"


def _lockdown_notes(args: argparse.Namespace, report: ProvisionReport, where: str) -> None:
    """What became of the operator, guest and Redis' default user, and how to undo it."""
    op = report.operator
    if op is not None:
        if op.credentials is not None:
            _note(
                f"operator {op.user!r}: broker user {op.broker}, Redis user {op.redis} "
                f"(broker administrator; Redis {_rules()}); from now on run `mesh access` "
                f"with MESH_MANAGEMENT_URL and MESH_REDIS_URL of {where}"
            )
        else:
            _note(f"operator {op.user!r} kept; its passwords are unchanged and not shown again")
        _note(
            f"remove the operator: rabbitmqctl delete_user {op.user}; "
            f"redis-cli --user {op.user} --askpass ACL DELUSER {op.user}"
        )
    if report.guest is None:
        _note(
            f"broker user {args.guest!r} left as it is (--keep-guest): whoever reaches the "
            "broker may log in with its password (development only)"
        )
    else:
        name, what = report.guest
        done = {
            "switched off": "can no longer log in (its password was taken away)",
            "already off": "had no password already",
            "absent": "does not exist",
        }[what]
        _note(f"broker user {name!r} {done}; undo: rabbitmqctl change_password {name} guest")
    if report.redis_default is None:
        _note(
            "Redis user 'default' left as it is (--keep-redis-default): a client without a "
            "login may run every command on every key (development only)"
        )
    else:
        op_name = op.user if op is not None else "OPERATOR"
        _note(
            f"Redis user 'default' {report.redis_default}: a client without a login is "
            f"refused; undo: redis-cli --user {op_name} --askpass ACL SETUSER default on"
        )


def _revoke(args: argparse.Namespace, settings: Settings) -> int:
    scope = _scope(args, settings)
    named = _named_roles(args)
    provisioner = Provisioner.from_settings(settings)
    try:
        report = provisioner.revoke(
            scope,
            named or None,
            delete_vhost=args.delete_vhost,
            dry_run=args.dry_run,
        )
    finally:
        provisioner.close()
    verb = "would revoke" if args.dry_run else "revoked"
    for user in report.removed:
        print(f"{verb} user {user!r}")
    for user in report.absent:
        _note(f"no provisioned user {user!r} in vhost {scope.vhost!r}")
    if not report.removed:
        _note(f"no provisioned users with prefix {scope.user_prefix!r}")
    if report.policy_removed:
        print(f"{'would delete' if args.dry_run else 'deleted'} policy {report.policy_removed}")
    if report.vhost_deleted:
        print(f"{'would delete' if args.dry_run else 'deleted'} vhost {scope.vhost!r}")
    return 0


def _note(text: str) -> None:
    print(f"mesh access: {text}", file=sys.stderr)
