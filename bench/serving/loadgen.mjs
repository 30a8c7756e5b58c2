// Closed-loop load generator for an OpenAI-compatible server (spindle serve, or any peer):
// C clients each send a streaming /v1/completions request, wait for its last token, send the
// next, until N requests are done. Prompts are token ids (exact lengths, random, distinct per
// request so the prefix cache does not help); ignore_eos makes every request produce exactly
// the asked number of tokens.
//
//   node bench/serving/loadgen.mjs --url http://127.0.0.1:8080 --model kjv-tiny \
//     --requests 64 --concurrency 16 --prompt-tokens 128 --output-tokens 64 --vocab 4096 [--json FILE]
//
// Shared prefixes (--prefix-tokens P --groups G): every prompt starts with one of G random
// prefixes of P tokens (chosen at random per request), then its own --prompt-tokens; the run then
// also reports the prefix-cache hit ratio (spindle_prefix_cache_hits_total over
// spindle_prefix_cache_queries_total during the run) and the router's decisions by reason.
//
// Prints output tok/s, TTFT and TPOT percentiles (TPOT = (end - first token) / (tokens - 1) per
// request), and, when the server exposes spindle_step_seconds_total, the engine's step-time
// breakdown over the run (host work = everything but the forward). Uses Node's own fetch.
import { writeFileSync } from 'node:fs';

function parseArgs(argv) {
  const a = { url: 'http://127.0.0.1:8080', model: 'kjv-tiny', requests: 32, concurrency: 1, promptTokens: 128,
              outputTokens: 64, vocab: 4096, seed: 1, json: '', prefixTokens: 0, groups: 1 };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-(\w)/g, (_, c) => c.toUpperCase());
    if (!(key in a)) throw new Error(`unknown flag ${argv[i]}`);
    a[key] = typeof a[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  return a;
}

// mulberry32: a small seeded generator, so runs are repeatable.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function oneRequest(args, prompt) {
  const start = performance.now();
  const res = await fetch(`${args.url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: args.model, prompt, max_tokens: args.outputTokens, temperature: 0,
                           ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let first = 0, tokens = 0, buffer = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 2);
      if (!event.startsWith('data:')) continue;
      const data = event.slice(5).trim();
      if (data === '[DONE]') continue;
      const msg = JSON.parse(data);
      if (msg.usage) tokens = msg.usage.completion_tokens;
      if (!first && msg.choices?.length && msg.choices[0].text !== undefined) first = performance.now();
    }
  }
  const end = performance.now();
  if (tokens !== args.outputTokens) throw new Error(`got ${tokens} tokens, asked ${args.outputTokens}`);
  return { ttft: (first - start) / 1e3, e2e: (end - start) / 1e3, tpot: (end - first) / 1e3 / Math.max(1, tokens - 1), tokens };
}

// Unlabelled prefix-cache totals and the router's decisions, or null.
async function cacheTotals(url) {
  try {
    const text = await (await fetch(`${url}/metrics`)).text();
    const one = (name) => Number((text.match(new RegExp(`^${name} (\\S+)$`, 'm')) ?? [0, NaN])[1]);
    const router = {};
    for (const m of text.matchAll(/^spindle_router_decisions_total\{method="\w+",reason="(\w+)"\} (\S+)$/gm)) router[m[1]] = Number(m[2]);
    const perRank = {};
    for (const m of text.matchAll(/^spindle_router_requests_total\{dp_rank="(\d+)"\} (\S+)$/gm)) perRank[m[1]] = Number(m[2]);
    return { hits: one('spindle_prefix_cache_hits_total'), queries: one('spindle_prefix_cache_queries_total'), router, perRank };
  } catch { return null; }
}

function delta(before, after) {
  if (!before || !after) return null;
  const d = (a, b) => Object.fromEntries(Object.keys(a).map((k) => [k, a[k] - (b[k] ?? 0)]));
  const hits = after.hits - before.hits, queries = after.queries - before.queries;
  return { prefix_hit_tokens: hits, prefix_query_tokens: queries, prefix_hit_ratio: queries > 0 ? hits / queries : 0,
           router_decisions: d(after.router, before.router), requests_per_rank: d(after.perRank, before.perRank) };
}

// spindle_step_seconds_total{phase,part} and spindle_steps_total{phase}, or null.
async function stepTotals(url) {
  try {
    const text = await (await fetch(`${url}/metrics`)).text();
    const out = {};
    for (const m of text.matchAll(/^spindle_step_seconds_total\{phase="(\w+)",part="(\w+)"\} (\S+)$/gm)) {
      (out[m[1]] ??= { steps: 0 })[m[2]] = Number(m[3]);
    }
    for (const m of text.matchAll(/^spindle_steps_total\{phase="(\w+)"\} (\S+)$/gm)) (out[m[1]] ??= {}).steps = Number(m[2]);
    return Object.keys(out).length ? out : null;
  } catch { return null; }
}

function breakdown(before, after) {
  if (!before || !after) return null;
  const result = {};
  for (const phase of Object.keys(after)) {
    const d = {};
    for (const k of Object.keys(after[phase])) d[k] = after[phase][k] - (before[phase]?.[k] ?? 0);
    const host = (d.schedule ?? 0) + (d.build ?? 0) + (d.sample ?? 0) + (d.output ?? 0);
    const total = host + (d.forward ?? 0);
    d.host_fraction = total > 0 ? host / total : 0;
    d.ms_per_step = d.steps > 0 ? (1e3 * total) / d.steps : 0;
    result[phase] = d;
  }
  return result;
}

const args = parseArgs(process.argv);
const random = rng(args.seed);
const token = () => Math.floor(random() * args.vocab);
const prefixes = Array.from({ length: args.prefixTokens > 0 ? args.groups : 0 }, () =>
  Array.from({ length: args.prefixTokens }, token));
const prompts = Array.from({ length: args.requests }, () => {
  const own = Array.from({ length: args.promptTokens }, token);
  return prefixes.length ? prefixes[Math.floor(random() * prefixes.length)].concat(own) : own;
});

const before = await stepTotals(args.url);
const cacheBefore = await cacheTotals(args.url);
const results = [];
let next = 0;
const t0 = performance.now();
await Promise.all(Array.from({ length: args.concurrency }, async () => {
  while (next < prompts.length) results.push(await oneRequest(args, prompts[next++]));
}));
const wall = (performance.now() - t0) / 1e3;
const after = await stepTotals(args.url);
const cache = delta(cacheBefore, await cacheTotals(args.url));

const sorted = (k) => results.map((r) => r[k]).sort((a, b) => a - b);
const ttft = sorted('ttft'), tpot = sorted('tpot');
const outputTokens = results.reduce((s, r) => s + r.tokens, 0);
const summary = {
  requests: results.length, concurrency: args.concurrency, prompt_tokens: args.promptTokens,
  prefix_tokens: args.prefixTokens, groups: prefixes.length, cache,
  output_tokens: args.outputTokens, wall_s: wall, output_tok_s: outputTokens / wall,
  ttft_ms: { p50: 1e3 * percentile(ttft, 50), p90: 1e3 * percentile(ttft, 90), p99: 1e3 * percentile(ttft, 99) },
  tpot_ms: { p50: 1e3 * percentile(tpot, 50), p90: 1e3 * percentile(tpot, 90), p99: 1e3 * percentile(tpot, 99) },
  steps: breakdown(before, after),
};
const f = (x) => x.toFixed(2);
console.log(`C=${args.concurrency} N=${summary.requests} prompt ${prefixes.length ? `${args.prefixTokens}+` : ''}${args.promptTokens} output ${args.outputTokens}: ` +
            `${f(summary.output_tok_s)} output tok/s in ${f(wall)} s; TTFT p50/p90/p99 ${f(summary.ttft_ms.p50)}/` +
            `${f(summary.ttft_ms.p90)}/${f(summary.ttft_ms.p99)} ms; TPOT p50/p90/p99 ${f(summary.tpot_ms.p50)}/` +
            `${f(summary.tpot_ms.p90)}/${f(summary.tpot_ms.p99)} ms`);
if (cache && prefixes.length) {
  console.log(`  prefix cache: ${f(100 * cache.prefix_hit_ratio)}% of prompt tokens hit (${cache.prefix_hit_tokens} of ` +
              `${cache.prefix_query_tokens}); router ${JSON.stringify(cache.router_decisions)}; per rank ` +
              `${JSON.stringify(cache.requests_per_rank)}`);
}
if (summary.steps) {
  for (const [phase, d] of Object.entries(summary.steps)) {
    if (!d.steps) continue;
    console.log(`  ${phase} steps ${d.steps}: ${f(d.ms_per_step)} ms/step; host ${f(100 * d.host_fraction)}% ` +
                `(schedule ${f(1e3 * d.schedule / d.steps)}, build ${f(1e3 * d.build / d.steps)}, forward ` +
                `${f(1e3 * d.forward / d.steps)}, sample ${f(1e3 * d.sample / d.steps)}, output ` +
                `${f(1e3 * d.output / d.steps)} ms/step)`);
  }
}
if (args.json) writeFileSync(args.json, JSON.stringify(summary, null, 2));
