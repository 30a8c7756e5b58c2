// What every Node client test under tests/node shares: where the server is and the run of its
// cases. The server itself is the real `spindle serve`, started by the GoogleTest case that runs
// the script (tests/server/node_client.h):
//   node tests/node/SCRIPT.mjs http://127.0.0.1:PORT/v1 [API_KEY]
// A script imports this module, builds its client from server(SCRIPT) and ends with
// await runCases(SCRIPT, cases): each case an async function, run in order; a case fails when it
// throws. Prints "ok NAME" / "FAILED NAME: stack" per case, then "SCRIPT: N ok, M failing", and
// exits 1 when any failed (2 on a bad command line).
import OpenAI from 'openai';

// { baseURL, apiKey } from the command line; exits 2 without a base URL.
export function server(script) {
  const baseURL = process.argv[2];
  if (!baseURL) {
    console.error(`usage: node ${script}.mjs BASE_URL [API_KEY]`);
    process.exit(2);
  }
  return { baseURL, apiKey: process.argv[3] ?? 'unused' };
}

// The official OpenAI client for that server: no retries, 30 s per request, and Node's own fetch
// (undici, Node >= 18) rather than the SDK's bundled node-fetch 2: on Debian 12's Node 18.20
// node-fetch 2 fails valid chunked + gzip responses with "Premature close" (a known node-fetch /
// Node regression; curl and undici read the same bytes fine).
export function openaiClient(script) {
  const { baseURL, apiKey } = server(script);
  return new OpenAI({
    baseURL, apiKey, maxRetries: 0, timeout: 30_000,
    ...(globalThis.fetch ? { fetch: globalThis.fetch } : {}),
  });
}

// Runs every case of `cases` ({ name: async () => {...} }) in order, reports, and exits.
export async function runCases(script, cases) {
  let failed = 0;
  for (const [name, run] of Object.entries(cases)) {
    try {
      await run();
      console.log(`ok ${name}`);
    } catch (e) {
      ++failed;
      console.log(`FAILED ${name}: ${e?.stack ?? e}`);
    }
  }
  console.log(`${script}: ${Object.keys(cases).length - failed} ok, ${failed} failing`);
  process.exit(failed ? 1 : 0);
}
