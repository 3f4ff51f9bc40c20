'use strict';
/**
 * A mesh worker in Node.js: registers, heartbeats, takes tasks from its agent queue and
 * answers them, honouring deadlines and fencing tokens, as the contract says
 * (`contract.js`: the AsyncAPI document and its `x-mesh-redis` steps).
 *
 * Per delivery: decode the TaskEnvelope -> FCALL claim under this instance's token -> the
 * handler, cancelled at the task's deadline -> FCALL finish (the fenced commit) -> answer
 * the callers (or, under access control, a router) -> ack. A refused commit answers
 * nobody and hands the delivery back.
 *
 * The subset of the Python worker it implements: registration and lease renewal,
 * claims, deadlines (expired in the queue or while running), fenced commits, hand-backs
 * (busy or stale claims, stale commits, Redis away), apply_once, fence checks, the outcome
 * events and dead letters of invalid and expired tasks. Not here: bids, handoffs, shared
 * context, retries on request (a handler error is a failed Result), input contracts, the
 * processing watchdog and spans.
 */
const crypto = require('node:crypto');
const amqp = require('amqplib');
const { createClient } = require('redis');

const JSON_TYPE = 'application/json';
const WAITER_SEP = '\u001f';
//: what the deferred-copy and delay headers are called (the retriedTask message of the document)
const DELAY_HEADER = 'mesh-delay';
const DEFERRED_HEADER = 'x-mesh-deferred';
const REASON_HEADER = 'x-mesh-reason';
const DETAILS_HEADER = 'x-mesh-details';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const newId = () => crypto.randomUUID().replace(/-/g, '');

/** A handler's way to say "failed, with this code" (anything else is handler_error). */
class TaskFailed extends Error {
  constructor(code, message, details = {}) {
    super(message);
    this.code = code;
    this.details = details;
  }
}

/** A fenced step was refused: this instance no longer holds the task. */
class StaleToken extends Error {}

function log(level, msg, fields = {}) {
  process.stdout.write(`${JSON.stringify({ ts: Date.now(), level, msg, ...fields })}\n`);
}

function loginOf(url) {
  return decodeURIComponent(new URL(url).username || 'guest');
}

function vhostOf(url) {
  const path = new URL(url).pathname;
  return path.length > 1 ? decodeURIComponent(path.slice(1)) : '/';
}

/** The tenant prefix of every Redis key (`x-mesh-redis.prefix`). */
function tenantPrefix(namespace, vhost) {
  return vhost === '/' ? namespace : `${encodeURIComponent(vhost)}/${namespace}`;
}

function envFlag(value) {
  return ['1', 'true', 'yes', 'on'].includes(String(value || '').toLowerCase());
}

class MeshAgent {
  /**
   * @param {object} spec agentId, capability, examples, keywords, tags, maxConcurrency, handler
   * @param {Contract} contract the document this agent follows
   * @param {object} env MESH_* variables (process.env)
   */
  constructor(spec, contract, env = process.env) {
    this.spec = { examples: [], keywords: [], tags: {}, maxConcurrency: 4, ...spec };
    this.agentId = spec.agentId;
    this.instanceId = `${spec.agentId}-${newId().slice(0, 12)}`;
    this.contract = contract;
    this.amqpUrl = (env.MESH_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/').split(',')[0];
    this.redisUrl = env.MESH_REDIS_URL || 'redis://127.0.0.1:6379/0';
    this.accessControl = envFlag(env.MESH_ACCESS_CONTROL ?? contract.setting('MESH_ACCESS_CONTROL'));
    this.passive = (env.MESH_TOPOLOGY || 'apply') === 'passive';
    this.ttlMs = Number(env.MESH_IDEMPOTENCY_TTL_S || contract.setting('MESH_IDEMPOTENCY_TTL_S')) * 1000;
    this.lifetimeMs = Number(env.MESH_MAX_TASK_LIFETIME_S || contract.setting('MESH_MAX_TASK_LIFETIME_S')) * 1000;
    this.login = loginOf(this.amqpUrl);
    const prefix = tenantPrefix(contract.namespace, vhostOf(this.amqpUrl));
    this.prefix = prefix;
    // under access control the task records are the agent's view (`x-mesh-redis.prefix`)
    this.records = this.accessControl ? `${prefix}:agent/${this.agentId}/` : prefix;
    this.token = null;
    this.leaseTtlS = 15;
    this.heartbeatS = 5;
    this.inFlight = 0;
    this.beating = true;
    this.stopped = false;
    this.pending = new Map();
    this.relogin = null;
    this.consumerTags = [];
    this.registrations = 0;
  }

  // --- start and stop ------------------------------------------------------------------
  async start() {
    this.redis = createClient({ url: this.redisUrl });
    this.redis.on('error', (err) => log('warning', 'redis error', { error: String(err) }));
    await this.redis.connect();
    this.conn = await amqp.connect(this.amqpUrl, { clientProperties: { connection_name: this.instanceId } });
    this.conn.on('error', (err) => log('error', 'amqp connection error', { error: String(err) }));
    this.ch = await this.conn.createConfirmChannel();
    await this.ch.prefetch(this.spec.maxConcurrency);
    const c = this.contract;
    this.queues = c.channelIds('queue.agent').map((id) => ({
      band: id.split('.')[2] || '',
      ...c.queue(id, { agentId: this.agentId }),
    }));
    for (const q of this.queues) await this.declare(q);
    const session = c.queue('queue.session', { instanceId: this.instanceId, agentId: this.agentId });
    await this.ch.assertQueue(session.name, session.options);
    for (const b of session.bindings) await this.ch.bindQueue(session.name, b.exchange, b.routingKey);
    this.sessionQueue = session.name;
    await this.ch.consume(session.name, (msg) => msg && this.onSession(msg), { noAck: true });
    await this.register();
    this.heartbeats = setInterval(() => this.beat(), this.heartbeatS * 1000);
    for (const q of this.queues) {
      const { consumerTag } = await this.ch.consume(q.name, (msg) => msg && this.onTask(msg, q.band));
      this.consumerTags.push(consumerTag);
    }
    log('info', 'consuming', { agent_id: this.agentId, instance_id: this.instanceId, queues: this.queues.map((q) => q.name) });
  }

  /** An agent queue as the document declares it (passive: only checked, never created). */
  async declare(q) {
    if (this.passive) {
      await this.ch.checkQueue(q.name);
      return;
    }
    await this.ch.assertQueue(q.name, q.options);
    for (const b of q.bindings) await this.ch.bindQueue(q.name, b.exchange, b.routingKey);
  }

  /** Stop consuming, wait for the tasks in flight (up to `graceMs`), deregister, close. */
  async stop(graceMs = 5000) {
    if (this.stopped) return;
    this.stopped = true;
    for (const tag of this.consumerTags) await this.ch.cancel(tag).catch(() => {});
    const until = Date.now() + graceMs;
    while (this.inFlight > 0 && Date.now() < until) await sleep(20);
    clearInterval(this.heartbeats);
    if (this.token !== null) {
      const goodbye = { agent_id: this.agentId, instance_id: this.instanceId, token: this.token };
      await this.publish('exchange.registry', {}, goodbye, { type: 'deregister' }).catch(() => {});
    }
    await this.conn.close().catch(() => {});
    await this.redis.quit().catch(() => {});
    log('info', 'deregistered', { instance_id: this.instanceId });
  }

  // --- the registry session --------------------------------------------------------------
  registration() {
    const s = this.spec;
    return {
      agent_id: this.agentId,
      instance_id: this.instanceId,
      name: s.name || this.agentId,
      version: s.version || '0',
      capability_text: s.capability,
      examples: s.examples,
      keywords: s.keywords,
      tags: s.tags,
      supported_tasks: s.supportedTasks || [],
      max_concurrency: s.maxConcurrency,
      bids: false,
    };
  }

  /** Register until a registry answers (backoff up to 5 s); sets the fencing token. */
  async register() {
    const body = this.registration();
    const missing = this.contract.missing('Registration', body);
    if (missing.length) throw new Error(`registration lacks ${missing.join(', ')}`);
    for (let attempt = 1; !this.stopped; attempt++) {
      const correlationId = newId();
      const answer = new Promise((resolve, reject) => this.pending.set(correlationId, { resolve, reject }));
      await this.publish('exchange.registry', {}, body, {
        type: 'register',
        replyTo: this.sessionQueue,
        correlationId,
        expiration: '2000',
      });
      const timer = sleep(2000).then(() => null);
      const ack = await Promise.race([answer, timer]).finally(() => this.pending.delete(correlationId));
      if (ack !== null) {
        this.token = ack.token;
        this.leaseTtlS = ack.lease_ttl_s;
        this.heartbeatS = ack.heartbeat_s;
        this.registrations += 1;
        log('info', 'registered', { agent_id: this.agentId, instance_id: this.instanceId, token: ack.token });
        return;
      }
      log('warning', 'no registry answered; retrying', { attempt });
      await sleep(Math.min(5000, 200 * 2 ** attempt));
    }
  }

  onSession(msg) {
    const type = msg.properties.type;
    const body = JSON.parse(msg.content.toString('utf8'));
    if (type === 'lease.lost') {
      this.leaseLost(body.token, 'registry notice');
      return;
    }
    const waiting = this.pending.get(msg.properties.correlationId);
    if (!waiting) return;
    if (type === 'register.ack') waiting.resolve(body);
    else waiting.reject(new Error(`registration refused: ${body.code}: ${body.message}`));
  }

  /** The lease of `token` is gone: register again, once however many ask. */
  leaseLost(token, how) {
    if (this.stopped || token !== this.token || this.relogin) return this.relogin;
    log('warning', 'lease lost; re-registering', { instance_id: this.instanceId, token, how });
    this.relogin = this.register().finally(() => {
      this.relogin = null;
    });
    return this.relogin;
  }

  /** Wait (up to a lease) for a new token after `stale` was refused; true once it changed. */
  async renew(stale) {
    if (this.token !== stale) return true;
    const relogin = this.leaseLost(stale, 'claim refused');
    if (relogin) await Promise.race([relogin, sleep(this.leaseTtlS * 1000)]);
    return this.token !== stale;
  }

  beat() {
    if (!this.beating || this.token === null || this.stopped) return;
    const beat = {
      agent_id: this.agentId,
      instance_id: this.instanceId,
      token: this.token,
      in_flight: this.inFlight,
      stuck: 0,
      max_concurrency: this.spec.maxConcurrency,
      sent_ms: Date.now(),
    };
    this.publish('exchange.registry', {}, beat, {
      type: 'heartbeat',
      replyTo: this.sessionQueue,
      expiration: String(Math.round(this.heartbeatS * 1000)),
      persistent: false,
      confirm: false,
    }).catch((err) => log('warning', 'heartbeat not sent', { error: String(err) }));
  }

  /** A partition drill: no heartbeats until `resumeHeartbeats` (the lease lapses). */
  suspendHeartbeats() {
    this.beating = false;
  }

  resumeHeartbeats() {
    this.beating = true;
    this.beat();
  }

  // --- publishing ------------------------------------------------------------------------
  /** Publish `body` as JSON to the exchange of `channelId`, keyed by its address. */
  async publish(channelId, keyParams, body, props = {}) {
    const c = this.contract;
    await this.send(c.exchange(channelId), c.routingKey(channelId, keyParams), body, props);
  }

  /** Every publish goes through here, stamped with this login (the broker checks it). */
  async send(exchange, key, body, props = {}) {
    const { confirm = true, persistent = true, ...rest } = props;
    const content = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
    const options = { contentType: JSON_TYPE, persistent, userId: this.login, ...rest };
    if (!confirm) {
      this.ch.publish(exchange, key, content, options);
      return;
    }
    await new Promise((resolve, reject) =>
      this.ch.publish(exchange, key, content, options, (err) => (err ? reject(err) : resolve())),
    );
  }

  async emit(type, envelope, data = {}) {
    const event = {
      type,
      trace_id: envelope.trace_id,
      task_id: envelope.task_id,
      agent_id: this.agentId,
      instance_id: this.instanceId,
      data,
      ts_ms: Date.now(),
    };
    // an outcome goes to the router that dispatched the task (x-mesh-redis.worker: Outcome)
    const router = envelope.route && envelope.route.router;
    const key = router && type.startsWith('task.') ? `${type}.${router}` : type;
    await this.send(this.contract.exchange('exchange.events'), key, event, { persistent: false, confirm: false });
  }

  /** Send a body exactly as received to the dead letters of `reason`. */
  async deadLetter(reason, raw, details) {
    const headers = { [REASON_HEADER]: reason, [DETAILS_HEADER]: JSON.stringify(details) };
    await this.publish('exchange.dlx.dead', { reason }, raw, { headers });
  }

  /** The delivery goes back to the agent's queue through the retry delay queue nearest `delayMs`. */
  async handBack(msg, envelope, band, delayMs) {
    const delays = this.contract.retryDelays();
    const delay = delays.find((d) => d >= delayMs) ?? delays[delays.length - 1];
    const params = { delay, agentId: this.agentId, band };
    await this.publish('exchange.retries', params, envelope, {
      priority: Math.min(10, Math.max(1, envelope.priority || 5)),
      messageId: envelope.task_id,
      correlationId: envelope.task_id,
      headers: { [DELAY_HEADER]: String(delay), [DEFERRED_HEADER]: this.instanceId },
    });
    this.ch.ack(msg);
  }

  // --- Redis: the mesh's functions ------------------------------------------------------
  async fcall(name, keys, args) {
    const fn = this.contract.fn(name);
    const reply = await this.redis.sendCommand([
      'FCALL',
      fn.name,
      String(keys.length),
      ...keys,
      ...args.map(String),
    ]);
    return reply;
  }

  key(family, ids = {}) {
    return this.contract.key(family, { records: this.records, prefix: this.prefix, ...ids });
  }

  holderArgs(token) {
    return [this.ttlMs, this.key('instance_prefix'), this.instanceId, token, '1'];
  }

  async claim(envelope, msg, token) {
    const id = { taskId: envelope.task_id, traceId: envelope.trace_id };
    const headers = msg.properties.headers || {};
    const redelivered = msg.fields.redelivered;
    const pristine =
      !redelivered && !envelope.attempt && !envelope.reroutes && !(DEFERRED_HEADER in headers);
    return this.fcall(
      'claim',
      ['idem', 'task', 'task_history', 'processing', 'trace_visits'].map((f) => this.key(f, id)),
      [
        ...this.holderArgs(token),
        redelivered ? '1' : '0',
        Date.now() + this.lifetimeMs,
        this.agentId,
        envelope.attempt ? '0' : '1',
        pristine ? '1' : '0',
        envelope.trace_id,
      ],
    );
  }

  async finish(result, token) {
    const id = { taskId: result.task_id, agentId: this.agentId };
    const keys = ['idem', 'task', 'task_history', 'task_waiters', 'processing'].map((f) => this.key(f, id));
    if (this.accessControl) {
      keys[3] = keys[0]; // the waiters are a router's to answer, not ours to read
      keys.push(this.key('sealed', id));
    }
    return this.fcall('finish', keys, [
      ...this.holderArgs(token),
      JSON.stringify(result),
      this.instanceId,
      result.error ? result.error.code : '',
      this.agentId,
      '0',
      result.status,
    ]);
  }

  async applyOnce(envelope, token, name, amount = 1) {
    const id = { taskId: envelope.task_id, name };
    const keys = ['idem', 'effect_done', 'side_effect', 'task'].map((f) => this.key(f, id));
    const answer = Number(await this.fcall('apply_once', keys, [...this.holderArgs(token), amount]));
    if (answer < 0) throw new StaleToken(`apply_once ${name} refused (${answer})`);
    return answer === 1;
  }

  async fence(token) {
    const answer = Number(await this.fcall('check', [this.key('instance', { instanceId: this.instanceId })], [token]));
    if (answer !== -1) throw new StaleToken(`token ${token} is stale (current: ${answer || 'none'})`);
  }

  // --- tasks -------------------------------------------------------------------------------
  onTask(msg, band) {
    this.inFlight += 1;
    this.runTask(msg, band)
      .catch(async (err) => {
        // Redis or the broker away, or a function not loaded: the delivery comes back later
        log('error', 'task not settled; requeued', { error: String(err && err.stack) });
        await sleep(1000);
        try {
          this.ch.nack(msg, false, true);
        } catch (nackErr) {
          log('error', 'nack failed', { error: String(nackErr) });
        }
      })
      .finally(() => {
        this.inFlight -= 1;
      });
  }

  async runTask(msg, band) {
    let envelope;
    try {
      envelope = JSON.parse(msg.content.toString('utf8'));
    } catch (err) {
      envelope = null;
    }
    const missing = this.contract.missing('TaskEnvelope', envelope);
    if (envelope === null || missing.length) {
      log('warning', 'invalid envelope dead-lettered', { missing });
      await this.deadLetter('invalid', msg.content, { errors: missing.map((f) => ({ loc: f, msg: 'Field required' })) });
      this.ch.ack(msg);
      return;
    }
    const task = { task_id: envelope.task_id };
    let token = this.token;
    let claim = await this.claim(envelope, msg, token);
    if (claim[0] === 'stale' && (await this.renew(token))) {
      token = this.token;
      claim = await this.claim(envelope, msg, token);
    }
    const status = claim[0];
    if (status === 'done') {
      if (claim[2] !== '1' && !this.accessControl) await this.answer(envelope, JSON.parse(claim[1]), []);
      this.ch.ack(msg);
      return;
    }
    if (status === 'busy' || status === 'stale') {
      log('info', `claim ${status}; handed back`, { ...task, holder: claim[1] });
      await this.handBack(msg, envelope, band, (this.leaseTtlS * 1000) / 3);
      return;
    }
    if (status !== 'claimed') {
      log('info', 'not run', { ...task, status, detail: claim[1] });
      this.ch.ack(msg);
      return;
    }
    const received = Date.now();
    const outcome = await this.execute(envelope, token, claim[1] === '1');
    const result = this.resultOf(envelope, outcome, { handler_ms: Date.now() - received });
    const commit = await this.finish(result, token);
    if (commit[0] === 'stale') {
      log('warning', 'result refused: stale token; handed back', { ...task, token });
      await this.handBack(msg, envelope, band, (this.leaseTtlS * 1000) / 3);
      return;
    }
    if (commit[0] !== 'ok') {
      log('info', 'result not stored', { ...task, status: commit[0] });
      this.ch.ack(msg);
      return;
    }
    if (outcome.code === 'expired_in_queue') {
      await this.deadLetter('expired', msg.content, { deadline_ms: envelope.deadline_ms });
    }
    await this.answer(envelope, result, commit.slice(1));
    await this.emit(`task.${result.status}`, envelope, { error: result.error ? result.error.code : null });
    this.ch.ack(msg);
    log('info', 'answered', { ...task, status: result.status, token });
  }

  /** The handler, cancelled at the task's deadline (or its maximum lifetime). */
  async execute(envelope, token, takeover) {
    const deadline = envelope.deadline_ms ?? Date.now() + envelope.timeout_ms;
    const left = deadline - Date.now();
    if (left <= 0) {
      return {
        kind: 'expired',
        code: 'expired_in_queue',
        message: "the task's deadline passed while it waited in the queue; not executed",
        details: { deadline_ms: envelope.deadline_ms },
      };
    }
    const limit = Math.min(left, this.lifetimeMs);
    const abort = new AbortController();
    const ctx = {
      agent: this,
      token,
      takeover,
      signal: abort.signal,
      timeLeftMs: () => deadline - Date.now(),
      applyOnce: (name, amount) => this.applyOnce(envelope, token, name, amount),
      fence: () => this.fence(token),
    };
    let timer;
    const expired = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), limit);
    });
    try {
      const output = await Promise.race([this.spec.handler(envelope, ctx), expired]);
      if (output === null) {
        abort.abort();
        if (limit < left) {
          return { kind: 'failed', code: 'lifetime_exceeded', message: `cancelled after ${limit} ms` };
        }
        return { kind: 'expired', code: 'deadline_passed', message: "the handler was cancelled at the task's deadline" };
      }
      if (output === undefined || typeof output !== 'object' || Array.isArray(output)) {
        return { kind: 'failed', code: 'bad_handler_output', message: 'the handler must return a JSON object' };
      }
      return { kind: 'completed', output };
    } catch (err) {
      if (err instanceof TaskFailed) return { kind: 'failed', code: err.code, message: err.message, details: err.details };
      log('error', 'handler failed', { task_id: envelope.task_id, error: String(err && err.stack) });
      return { kind: 'failed', code: 'handler_error', message: `${err && err.name}: handler failed` };
    } finally {
      clearTimeout(timer);
    }
  }

  resultOf(envelope, outcome, timings) {
    const result = {
      task_id: envelope.task_id,
      trace_id: envelope.trace_id,
      status: outcome.kind,
      agent_id: this.agentId,
      instance_id: this.instanceId,
      route: envelope.route ?? null,
      timings,
      hops: envelope.hops || 0,
    };
    if (outcome.kind === 'completed') result.output = outcome.output;
    else result.error = { code: outcome.code, message: outcome.message, details: outcome.details || {} };
    return result;
  }

  /** The Result to every waiter and the envelope's own reply_to; under access control to
   * the routers (the results exchange), which forward the sealed copy. */
  async answer(envelope, result, waiters) {
    if (this.accessControl) {
      await this.publish('exchange.results', {}, result, {
        correlationId: result.task_id,
        messageId: `result:${result.task_id}`,
      });
      return;
    }
    const targets = new Set(waiters);
    if (envelope.reply_to) {
      targets.add(envelope.correlation_id ? `${envelope.reply_to}${WAITER_SEP}${envelope.correlation_id}` : envelope.reply_to);
    }
    for (const waiter of targets) {
      const [queue, correlationId] = waiter.split(WAITER_SEP);
      const props = { correlationId: correlationId || result.task_id, messageId: `result:${result.task_id}` };
      // a mesh reply queue through the replies exchange, any other through the default one
      const key = this.contract.replyKey(queue);
      if (key === null) await this.send('', queue, result, props);
      else await this.send(this.contract.exchange('exchange.replies'), key, result, props);
    }
  }
}

module.exports = { MeshAgent, TaskFailed, StaleToken, log };
