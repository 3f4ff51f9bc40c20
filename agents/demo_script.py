"""The demo's scenario (`mesh demo`): the team, its settings, its data and its requests.

The stories (seed 000 sections 1 and 4, seed 002 section 7):

* routine requests in Chinese and English, routed by meaning; the knowledge base answers
  them as an HTTP endpoint behind ``mesh bridge http``;
* requests the Node.js agent of ``agents/node/`` answers (left out, with one line saying
  so, when node or npm is missing);
* a compound request handed off reception -> orders -> after-sales on one trace;
* a refund whose after-sales instance is SIGKILLed while the bank confirms: the survivor
  completes it and the refund is paid once;
* a frozen tracking call: the logistics worker's watchdog hands the task to the other
  instance;
* the content agent failing until its circuit breaker opens: complaints gets
  ``downstream_busy`` at once and answers in a plainer voice;
* a price dispute orders and after-sales hand back and forth, stopped at ``max_hops``;
* out-of-scope requests answered by the fallback agent;
* a payload that breaks the orders agent's contract (``order_no`` for ``order_id``);
* a malformed envelope published with plain aio-pika: answered and dead-lettered;
* the optional language-model agent, saying whether a model is configured.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aio_pika

from agents import _node as node
from agents import knowledge
from agents._data import CARRIER_API, TEMPLATE_STORE, Store, refund_effect
from agents.knowledge_http import ASK_PATH
from mesh import Agent
from mesh.bridge.registration import registration_document
from mesh.connection import MeshConnection
from mesh.demo.run import Member
from mesh.demo.script import DemoRun, Expect
from mesh.schemas import Result, TaskEnvelope, decode, new_id
from mesh.schemas.codec import loads


def _free_port() -> int:
    """A loopback port nothing listens on now (the knowledge endpoint's)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: where the bridged agents' registration files are written (the demo's log folder)
REGISTRATION_DIR = Path(__file__).resolve().parents[1] / ".demo-logs"


def _bridged(agent: Agent, url: str) -> tuple[str, ...]:
    """``mesh bridge http`` arguments giving the endpoint `url` all of `agent`'s registration
    (texts, tags, name, input and output contract), written to a registration file."""
    REGISTRATION_DIR.mkdir(parents=True, exist_ok=True)
    path = REGISTRATION_DIR / f"{agent.agent_id}.registration.json"
    partial = path.with_suffix(f".{new_id()}.tmp")  # two demos at once: whole files only
    partial.write_text(json.dumps(registration_document(agent), ensure_ascii=False, indent=1))
    partial.replace(path)
    return ("bridge", "http", agent.agent_id, "--url", url, "--registration", str(path))


def _node_ready(root: Path) -> str | None:
    """``npm ci --prefix agents/node`` for the Node.js agent; why it cannot run, if so."""
    absent = node.missing()
    if absent:
        return f"{' and '.join(absent)} not found, so the Node.js agent's requests are left out"
    print("demo: npm ci --prefix agents/node (the Node.js agent's amqplib and redis)", flush=True)
    try:
        node.install()
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
        return f"npm ci failed ({last[0]}), so the Node.js agent's requests are left out"
    return None


#: the knowledge base runs as an HTTP endpoint (`agents.knowledge_http`, stdlib only)
#: behind ``mesh bridge http``, with the Python agent's registration (capability text,
#: examples, keywords, tags, input contract): `agents.knowledge.answer` is the endpoint's
#: whole logic
KNOWLEDGE_PORT = _free_port()
KNOWLEDGE_BRIDGE = Member(
    knowledge.agent.agent_id,
    args=_bridged(knowledge.agent, f"http://127.0.0.1:{KNOWLEDGE_PORT}{ASK_PATH}"),
    backend=(sys.executable, "-m", "agents.knowledge_http", "--port", str(KNOWLEDGE_PORT)),
)
#: text statistics, the Node.js agent of ``agents/node/`` (``node text-stats.js``; it
#: follows the namespace's AsyncAPI document); skipped when node or npm is missing
TEXT_STATS = "cs.text_stats"
NODE_AGENT = Member(
    TEXT_STATS,
    program=("node", str(node.NODE_DIR / "text-stats.js")),
    env={"MESH_NODE_AGENT_ID": TEXT_STATS},
    prepare=_node_ready,
)

TEAM: tuple[Member, ...] = (
    Member("cs.reception", "agents.reception:agent"),
    Member("cs.orders", "agents.orders:agent"),
    Member("cs.after_sales", "agents.after_sales:agent", instances=2),
    Member("cs.logistics", "agents.logistics:agent", instances=2),
    Member("cs.complaints", "agents.complaints:agent"),
    Member("cs.content", "agents.content:agent"),
    KNOWLEDGE_BRIDGE,
    Member("cs.log_analysis", "agents.log_analysis:agent"),
    Member("cs.fallback", "agents.fallback:agent"),
    Member("cs.assistant", "agents.assistant:agent"),
    NODE_AGENT,
)

RECEPTION, ORDERS, AFTER_SALES = "cs.reception", "cs.orders", "cs.after_sales"
LOGISTICS, COMPLAINTS, CONTENT = "cs.logistics", "cs.complaints", "cs.content"
KNOWLEDGE, LOGS, FALLBACK, ASSISTANT = (
    "cs.knowledge",
    "cs.log_analysis",
    "cs.fallback",
    "cs.assistant",
)
#: the order refunded in the SIGKILL story (its bank gateway confirms slowly)
KILLED_REFUND = "A-1007"


def environment(quick: bool) -> dict[str, str]:
    """``MESH_*`` of every process: short leases (a killed worker is noticed in 3 s), the
    fallback agent, a breaker that opens on 3 calls and stays open through the demo, and
    no exploration: a router gives a share of its decisions (5 % by default) to an
    eligible agent with few completed tasks to learn about it, which in a freshly started
    team is any of them (a parcel question once went to orders, strategy ``exploration``);
    the script expects the best match every time."""
    return {
        "MESH_EXPLORATION_SHARE": "0",
        "MESH_HEARTBEAT_S": "0.75",
        "MESH_LEASE_TTL_S": "3",
        "MESH_FALLBACK_AGENT": FALLBACK,
        "MESH_BREAKER_MIN_CALLS": "3",
        "MESH_BREAKER_OPEN_S": "60",
        "MESH_LOG_LEVEL": "INFO",
    }


async def seed(conn: MeshConnection) -> None:
    await Store(conn.redis, conn.keys).seed()


def _has(key: str, value: Any = True) -> Any:
    return lambda out: out.get(key) == value


def _answered(out: dict[str, Any]) -> bool:
    """A reply, and no error said in it (a handoff that failed answers with its code)."""
    return isinstance(out.get("reply"), str) and "error" not in out


#: (text, payload, expected agents): requests the routers place by meaning alone
ROUTINE: tuple[tuple[str, dict[str, Any], tuple[str, ...]], ...] = (
    ("你好", {}, (RECEPTION,)),
    ("hello, is anyone there?", {}, (RECEPTION,)),
    ("查一下订单 A-1002 现在什么状态", {}, (ORDERS,)),
    ("what is the status of my order A-1004", {}, (ORDERS,)),
    ("我的快递到哪了？运单号 SF1000000002", {}, (LOGISTICS,)),
    ("where is my parcel SF1000000009? it is late", {}, (LOGISTICS,)),
    ("能开公司发票吗", {}, (KNOWLEDGE,)),
    ("how long is the warranty on electronics", {}, (KNOWLEDGE,)),
    ("帮我看看这个报错码是啥：PAY-4021", {}, (LOGS,)),
    ("what does error code WMS-503 mean in the log", {}, (LOGS,)),
    ("鞋子尺码不合适，订单 A-1003 我要退货", {}, (AFTER_SALES,)),
    ("I want to return the e-book reader from order A-1006", {}, (AFTER_SALES,)),
    ("客服态度太差了，我要投诉", {}, (COMPLAINTS,)),
    ("I want to file a complaint about your courier", {}, (COMPLAINTS,)),
    ("写一条包裹延误的通知", {}, (CONTENT,)),
    ("write a thank-you note for a loyal customer", {}, (CONTENT,)),
    ("退货政策是什么，几天内可以退", {}, (KNOWLEDGE, AFTER_SALES)),
    ("do you offer free shipping", {}, (KNOWLEDGE,)),
    ("物流信息三天没更新了", {"order_id": "A-1002"}, (LOGISTICS,)),
    ("my package has not arrived yet", {"order_id": "A-1002"}, (LOGISTICS,)),
    ("订单 A-1004 的收货地址能改吗", {}, (ORDERS,)),
    ("downstream_busy 这个错误怎么处理", {}, (LOGS,)),
    ("这款耳机有降噪功能吗", {}, (KNOWLEDGE,)),
    ("good morning", {}, (RECEPTION,)),
    ("退款什么时候到账", {"order_id": "A-1003"}, (AFTER_SALES,)),
    ("explain this log line: ERROR task failed max_hops_exceeded", {}, (LOGS,)),
    ("帮我查一下订单 A-1005 的状态", {}, (ORDERS,)),
    ("has parcel SF1000000005 been delivered", {}, (LOGISTICS,)),
    ("可以开增值税专用发票吗", {}, (KNOWLEDGE,)),
    ("what does invalid_envelope mean in the error log", {}, (LOGS,)),
    ("how do I send back a faulty item from order A-1005", {}, (AFTER_SALES,)),
)
#: the --quick subset (one per agent, both languages)
QUICK_ROUTINE = (0, 2, 4, 6, 8, 10, 13, 15)


async def play(run: DemoRun) -> None:
    shop = Store(run.conn.redis, run.conn.keys)
    await routine(run)
    await node_agent(run)
    await compound(run)
    await killed_refund(run, shop)
    await frozen_tracking(run, shop)
    await breaker(run, shop)
    await ping_pong(run)
    await out_of_scope(run)
    await contract(run)
    await malformed(run)
    await assistant(run)


async def routine(run: DemoRun) -> None:
    run.section("Routine requests, Chinese and English, routed by meaning")
    chosen = [ROUTINE[i] for i in QUICK_ROUTINE] if run.quick else list(ROUTINE)
    for text, payload, agents in chosen:
        expect = Expect(agents=agents, output=_answered, means="a reply, no error")
        await run.ask("routine", text, expect, payload)


#: (text, the reply whose words are counted, its word count): the Node.js agent's requests
TEXT_STATS_REQUESTS: tuple[tuple[str, str, int], ...] = (
    ("帮我统计一下这段回复的字数", "您的包裹已发出。预计三天内送达！", 14),
    (
        "how many words are in this reply?",
        "Thank you for your patience. Your parcel is on its way.",
        11,
    ),
)


async def node_agent(run: DemoRun) -> None:
    run.section("An agent in Node.js (agents/node/text-stats.js), routed like the others")
    why = run.skipped.get(TEXT_STATS)
    if why is not None:
        run.show(f"  skipped: {why}")
        run.facts["Node.js agent"] = f"skipped ({why})"
        return
    chosen = TEXT_STATS_REQUESTS[:1] if run.quick else TEXT_STATS_REQUESTS
    answered = 0
    for text, reply, words in chosen:
        result = await run.ask(
            "node",
            text,
            Expect(agents=(TEXT_STATS,), output=_has("words", words), means=f"{words} words"),
            {"text": reply},
        )
        answered += result is not None and result.agent_id == TEXT_STATS
    run.facts["Node.js agent"] = f"{TEXT_STATS} answered {answered} of {len(chosen)}"


async def compound(run: DemoRun) -> None:
    run.section("A compound request: reception -> orders -> after-sales, one trace")
    result = await run.ask(
        "compound",
        "你好，我上个月买的手机（订单 A-1001）能退吗？",
        Expect(
            agents=(RECEPTION,),
            output=_has("handled_by", [RECEPTION, ORDERS, AFTER_SALES]),
            means="handled by reception, orders and after-sales",
        ),
        target=RECEPTION,
    )
    if result is not None:
        run.facts["compound trace"] = result.trace_id


async def killed_refund(run: DemoRun, shop: Store) -> None:
    run.section(f"A refund whose worker is SIGKILLed mid-task (order {KILLED_REFUND})")
    envelope = TaskEnvelope(
        capability=f"订单 {KILLED_REFUND} 的机械键盘我要退款",
        payload={"order_id": KILLED_REFUND},
        target=AFTER_SALES,
        timeout_ms=30_000,
    )
    asked = asyncio.ensure_future(
        run.send(
            "sigkill",
            envelope,
            Expect(
                agents=(AFTER_SALES,),
                output=lambda out: out.get("refunded") is True and out.get("applied_now") is False,
                means="refunded by the survivor, the payment found already applied",
            ),
            wait_s=40,
        )
    )
    victim = None
    end = time.monotonic() + 15
    while victim is None and time.monotonic() < end and not asked.done():
        record = await shop.refund(KILLED_REFUND)
        if record and record.get("status") == "pending":
            victim = str(record["instance_id"])
        else:
            await asyncio.sleep(0.05)  # the refund starts in another process
    if victim is None:
        run.check("sigkill", "kill an instance mid-refund", False, "the refund never started")
        await asyncio.gather(asked, return_exceptions=True)
        return
    run.fleet.kill(victim)
    run.show(f"  {run.since():7.3f}s  kill   SIGKILL {victim} (paid, waiting for the bank)")
    result: Result | None = await asked
    applied = int(
        await run.conn.redis.get(run.conn.keys.side_effect(refund_effect(KILLED_REFUND))) or 0
    )
    run.facts[f"refund side effects for {KILLED_REFUND}"] = applied
    run.facts["killed instance"] = victim
    survivor = result.instance_id if result is not None else None
    run.check(
        "sigkill",
        "the refund is paid exactly once",
        applied == 1 and survivor not in (None, victim),
        f"refund counter {applied} (expected 1), completed by {survivor} (killed {victim})",
    )


async def frozen_tracking(run: DemoRun, shop: Store) -> None:
    run.section("A frozen tracking call: the watchdog re-dispatches it to the other instance")
    await shop.fail_next(CARRIER_API, 1)
    result = await run.ask(
        "frozen",
        "我的包裹 SF1000000009 到哪了",
        Expect(agents=(LOGISTICS,), output=_has("tracking_no", "SF1000000009")),
        target=LOGISTICS,
        wait_s=30,
    )
    if result is None:
        return
    history = await run.conn.redis.lrange(run.conn.keys.task_history(result.task_id), 0, -1)
    runs = [e["by"] for e in map(loads, history) if e.get("state") == "processing"]
    run.check(
        "frozen",
        "handed to the other instance after the processing timeout",
        len(runs) >= 2 and runs[0] != result.instance_id,
        f"processed by {' then '.join(runs)}",
    )


async def breaker(run: DemoRun, shop: Store) -> None:
    run.section("Content fails until its breaker opens; complaints gets downstream_busy at once")
    await shop.take_down(TEMPLATE_STORE)
    text = "等了一个星期还没发货，太失望了，我要投诉"
    opened = False
    try:
        for n in range(10):
            result = await run.ask(
                "breaker",
                f"{text}（第 {n + 1} 次）",
                Expect(
                    agents=(COMPLAINTS,),
                    output=lambda out: out.get("degraded") in ("content_failed", "downstream_busy"),
                    means="a degraded reply while content is down",
                ),
                target=COMPLAINTS,
            )
            if result is not None and (result.output or {}).get("degraded") == "downstream_busy":
                opened = True
                break
        run.check("breaker", "the breaker opened", opened, "complaints got downstream_busy")
        for n in range(1 if run.quick else 3):
            began = time.monotonic()
            await run.ask(
                "breaker",
                f"I want to complain, my order is a week late ({n + 1})",
                Expect(agents=(COMPLAINTS,), output=_has("degraded", "downstream_busy")),
                target=COMPLAINTS,
            )
            took = time.monotonic() - began
            run.check("breaker", "answered at once", took < 1.5, f"in {took * 1000:.0f} ms")
    finally:
        await shop.take_down(TEMPLATE_STORE, down=False)


async def ping_pong(run: DemoRun) -> None:
    run.section("A price dispute bounced between orders and after-sales, stopped at max_hops")
    await run.ask(
        "max_hops",
        "订单 A-1008 的扫地机器人降价了，我要求补差价",
        Expect(agents=(ORDERS,), output=_has("error", "max_hops_exceeded")),
        target=ORDERS,
        max_hops=4,
    )


async def out_of_scope(run: DemoRun) -> None:
    run.section("Out of scope: the fallback agent")
    for text in ("明天巴黎的天气怎么样", "recommend a good movie for tonight"):
        await run.ask("fallback", text, Expect(agents=(FALLBACK,), strategy="fallback"))


async def contract(run: DemoRun) -> None:
    run.section("A payload that breaks the orders agent's contract (order_no for order_id)")
    await run.ask(
        "contract",
        "look up my order",
        Expect(status="failed", error="bad_payload"),
        {"order_no": "A-1001"},
        target=ORDERS,
    )


async def malformed(run: DemoRun) -> None:
    run.section("A malformed envelope from a plain AMQP client: answered and dead-lettered")
    conn = run.conn
    channel = await conn.channel()
    try:
        # what any AMQP client does to get answers: a queue bound to the replies exchange
        topology = conn.topology
        reply = await channel.declare_queue(topology.reply_queue(f"demo{new_id()[:8]}"))
        await reply.bind(topology.replies, routing_key=topology.reply_key(reply.name))
        ingress = await channel.get_exchange(conn.topology.ingress, ensure=False)
        body = (
            '{"task_id": "demo-malformed-1", "capability": "refund", "priority": 99, '
            f'"reply_to": "{reply.name}"}}'
        ).encode()
        await ingress.publish(
            aio_pika.Message(body, reply_to=reply.name), routing_key=conn.topology.ingress_key
        )
        run.show(f"  {run.since():7.3f}s  send   {body.decode()} (priority out of range)")
        answer = None
        end = time.monotonic() + 10
        while answer is None and time.monotonic() < end:
            answer = await reply.get(no_ack=True, fail=False)
            if answer is None:
                await asyncio.sleep(0.05)  # the router answers from another process
        await reply.delete(if_unused=False, if_empty=False)
    finally:
        await channel.close()
    if answer is None:
        run.check("malformed", "answered on reply_to", False, "no answer in 10 s")
        return
    result = decode(Result, answer.body)
    code = result.error.code if result.error else None
    run.check(
        "malformed", "answered on reply_to", result.status != "completed", f"{result.status} {code}"
    )
    dead = await _depth(conn, conn.topology.dead_queue("invalid"))
    run.check(
        "malformed", "dead-lettered", dead >= 1, f"{dead} in {conn.topology.dead_queue('invalid')}"
    )


async def assistant(run: DemoRun) -> None:
    run.section("The language-model agent (optional: MESH_DEMO_LLM_URL)")
    await run.ask(
        "assistant",
        "用一句话总结这段客户对话：客户说耳机有杂音，已经换过一次",
        Expect(agents=(ASSISTANT,), output=lambda out: bool(out.get("reply"))),
        target=ASSISTANT,
    )


async def _depth(conn: MeshConnection, queue: str) -> int:
    channel = await conn.channel()
    try:
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)
    finally:
        await channel.close()
