'use strict';
/**
 * A text-statistics agent in Node.js: words, characters and sentences of a text.
 *
 *   npm ci --prefix agents/node
 *   node agents/node/text-stats.js            # MESH_* variables as for any worker
 *
 * MESH_ASYNCAPI names the AsyncAPI document to follow (default: the repository's
 * schemas/asyncapi.json, namespace `mesh`; `mesh asyncapi --out FILE` writes another
 * namespace's). MESH_NODE_AGENT_ID chooses the agent id (default node.text-stats).
 */
const path = require('node:path');
const { Contract } = require('./contract');
const { MeshAgent, log } = require('./mesh-agent');

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

function stats(text) {
  const cjk = (text.match(/[\u3400-\u9fff]/g) || []).length;
  const words = (text.match(/[A-Za-z0-9'’-]+/g) || []).length + cjk;
  const sentences = text.split(/[.!?。！？]+/).filter((s) => s.trim()).length;
  return { words, characters: [...text].length, sentences };
}

async function handle(task, ctx) {
  const payload = task.payload || {};
  const drills = process.env.MESH_NODE_DRILLS === '1';
  if (drills && payload.drill === 'partition' && !ctx.takeover) {
    // a partition: no heartbeats while the handler runs, so the lease lapses under it
    ctx.agent.suspendHeartbeats();
    await sleep(Number(payload.hold_ms || 3000));
    ctx.agent.resumeHeartbeats();
  }
  if (payload.sleep_ms) await sleep(Number(payload.sleep_ms), ctx.signal);
  const text = typeof payload.text === 'string' ? payload.text : task.capability;
  return { ...stats(text), by: ctx.agent.instanceId, token: ctx.token };
}

async function main() {
  const file = process.env.MESH_ASYNCAPI || path.join(__dirname, '..', '..', 'schemas', 'asyncapi.json');
  const agent = new MeshAgent(
    {
      agentId: process.env.MESH_NODE_AGENT_ID || 'node.text-stats',
      name: 'Text statistics (Node.js)',
      capability:
        'Counts the words, characters and sentences of a text: word count and text statistics. ' +
        '统计一段文字的字数、字符数和句子数。',
      examples: [
        'how many words are in this paragraph?',
        'count the characters of this text',
        'give me the word count of my essay',
        '这段话有多少个字？',
        '帮我统计一下这篇文章的字数',
      ],
      keywords: ['word count', 'characters', '字数'],
      tags: { runtime: 'node' },
      maxConcurrency: 4,
      handler: handle,
    },
    Contract.load(file),
  );
  const stop = async (signal) => {
    log('info', 'stopping', { signal });
    await agent.stop();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  await agent.start();
}

main().catch((err) => {
  log('critical', 'agent failed', { error: String(err && err.stack) });
  process.exit(1);
});
