'use strict';
/**
 * The mesh's contract as its AsyncAPI document states it (schemas/asyncapi.json, or the
 * document `mesh asyncapi --out FILE` writes for another namespace): exchange, queue and
 * routing-key names, queue declarations, the JSON Schemas of the bodies, and the Redis keys
 * and functions of a worker (the document's `x-mesh-redis` extension). Nothing here knows
 * a name of its own: every one is read from the document.
 */
const fs = require('node:fs');

/** `template` with each `{name}` replaced by `params[name]` (a missing one throws). */
function fill(template, params) {
  return template.replace(/\{(\w+)\}/g, (_, name) => {
    if (!(name in params)) throw new Error(`no value for {${name}} in ${template}`);
    return String(params[name]);
  });
}

/** The parameters of `template` that `value` holds, or null when it does not match. */
function match(template, value) {
  const names = [];
  const source = template
    .split(/(\{\w+\})/)
    .map((part) => {
      const m = /^\{(\w+)\}$/.exec(part);
      if (!m) return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      names.push(m[1]);
      return '(.+)';
    })
    .join('');
  const found = new RegExp(`^${source}$`).exec(value);
  if (!found) return null;
  return Object.fromEntries(names.map((n, i) => [n, found[i + 1]]));
}

class Contract {
  constructor(doc) {
    this.doc = doc;
    this.redis = doc['x-mesh-redis'];
    if (!this.redis) throw new Error('the AsyncAPI document has no x-mesh-redis section (regenerate it)');
    this.namespace = this.redis.namespace;
  }

  static load(file) {
    return new Contract(JSON.parse(fs.readFileSync(file, 'utf8')));
  }

  amqp(channelId) {
    const channel = this.doc.channels[channelId];
    if (!channel) throw new Error(`the AsyncAPI document has no channel ${channelId}`);
    return channel.bindings.amqp;
  }

  /** The exchange of a routing-key channel. */
  exchange(channelId) {
    return this.amqp(channelId).exchange.name;
  }

  /** The routing key of a routing-key channel (its address) with `params` filled in. */
  routingKey(channelId, params = {}) {
    return fill(this.doc.channels[channelId].address, params);
  }

  /** A queue channel's name, declaration options and bindings, `params` filled in. */
  queue(channelId, params = {}) {
    const b = this.amqp(channelId);
    return {
      name: fill(b.queue.name, params),
      options: {
        durable: b.queue.durable,
        exclusive: b.queue.exclusive,
        autoDelete: b.queue.autoDelete,
        arguments: b['x-arguments'] || {},
      },
      bindings: (b['x-bindings'] || []).map((x) => ({
        exchange: x.exchange,
        routingKey: fill(x.routingKey, params),
      })),
    };
  }

  /** Ids of the channels whose id starts with `prefix` (an agent's queues: one, or a band each). */
  channelIds(prefix) {
    return Object.keys(this.doc.channels).filter((id) => id === prefix || id.startsWith(`${prefix}.`));
  }

  /** The delays (ms) of the retry queues, shortest first. */
  retryDelays() {
    return this.channelIds('queue.retry')
      .map((id) => Number(id.split('.').pop()))
      .sort((a, b) => a - b);
  }

  /** A mesh reply queue's routing key on the replies exchange, or null for any other queue. */
  replyKey(replyQueue) {
    const params = match(this.doc.channels['queue.reply'].address, replyQueue);
    return params === null ? null : this.routingKey('exchange.replies', params);
  }

  schema(name) {
    return this.doc.components.schemas[name];
  }

  /** The names of `schema`'s required fields that `body` lacks. */
  missing(schemaName, body) {
    const required = this.schema(schemaName).required || [];
    if (body === null || typeof body !== 'object' || Array.isArray(body)) return required;
    return required.filter((field) => !(field in body));
  }

  /** A Redis key of the worker: `{records}` / `{prefix}` and the ids filled in. */
  key(family, params) {
    return fill(this.redis.keys[family], params);
  }

  fn(name) {
    return this.redis.functions[name];
  }

  setting(name) {
    return this.redis.settings[name];
  }
}

module.exports = { Contract, fill, match };
