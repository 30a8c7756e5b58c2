// The official OpenAI Node client's Responses API against a running `spindle serve`:
//   node tests/node/openai_responses_test.mjs http://127.0.0.1:PORT/v1 [API_KEY]
// responses.create (text, and a conversation of items with a tool round trip), responses.stream
// (its event helper builds the response from output_item.added / content_part.added /
// output_text.delta, and throws without them), a forced function call whole and streamed
// (function_call_arguments.delta / .done), text.format json_schema, and the refused store / previous_response_id (a 400
// naming the field). Run by tests/server/server_responses_test.cc; exits non-zero on a failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { openaiClient, runCases } from './harness.mjs';

const client = openaiClient('openai_responses_test');

// Bounded schemas, as openai_client_test.mjs's chat tool test has them.
const tools = [
  { type: 'function', name: 'get_weather', strict: true, parameters: { type: 'object',
    properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'], additionalProperties: false } },
  { type: 'function', name: 'amen', parameters: { type: 'object', properties: { loud: { type: 'boolean' } },
    required: ['loud'], additionalProperties: false } },
];

function checkCall(item) {
  assert.equal(item.type, 'function_call');
  assert.match(item.call_id, /^call_[A-Za-z0-9]{24}$/);
  const args = JSON.parse(item.arguments);
  if (item.name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['city', 'days']);
    assert.ok(typeof args.city === 'string' && [...args.city].length <= 8, item.arguments);
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, item.arguments);
  } else {
    assert.equal(item.name, 'amen');
    assert.deepEqual(Object.keys(args), ['loud']);
    assert.equal(typeof args.loud, 'boolean');
  }
}

const tests = {
  async create() {
    const r = await client.responses.create({
      model: 'kjv-tiny', instructions: 'Be brief.', input: 'Who made the heaven and the earth?',
      max_output_tokens: 8, temperature: 0, ignore_eos: true,
    });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.store, false);
    assert.equal(r.output[0].type, 'message');
    assert.ok(r.output_text.length > 0, 'the client\'s output_text is empty');
    assert.equal(r.output_text, r.output[0].content[0].text);
    assert.equal(r.usage.output_tokens, 8);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + 8);
  },

  // The stream helper's events and final response equal the whole response (greedy).
  async stream() {
    const params = { model: 'kjv-tiny', input: 'Who made the heaven?', max_output_tokens: 8, temperature: 0, ignore_eos: true };
    const whole = await client.responses.create(params);
    const stream = client.responses.stream(params);
    let deltas = '', snapshot = '';
    const types = [];
    stream.on('event', (e) => types.push(e.type));
    stream.on('response.output_text.delta', (e) => { deltas += e.delta; snapshot = e.snapshot; });
    const final = await stream.finalResponse();
    assert.equal(deltas, whole.output_text);
    assert.equal(snapshot, whole.output_text);
    assert.equal(final.output[0].content[0].text, whole.output_text);
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
                                         'response.content_part.added']);
    assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done',
                                       'response.output_item.done', 'response.incomplete']);
    // A plain stream through create({stream: true}): sequence numbers from 0, without a gap.
    const raw = await client.responses.create({ ...params, stream: true });
    let n = 0;
    for await (const e of raw) assert.equal(e.sequence_number, n++);
    assert.equal(n, types.length);
  },

  async toolCallWholeAndStreamed() {
    const params = { model: 'kjv-tiny', input: 'Weather in Ur?', tools, tool_choice: 'required', parallel_tool_calls: false,
                     max_output_tokens: 120, temperature: 1, seed: 1 };
    const whole = await client.responses.create(params);
    assert.equal(whole.status, 'completed');
    const calls = whole.output.filter((i) => i.type === 'function_call');
    assert.equal(calls.length, 1);
    checkCall(calls[0]);
    const stream = client.responses.stream(params);
    let args = '';
    const done = [];
    stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
    stream.on('response.function_call_arguments.done', (e) => done.push(e.arguments));
    const final = await stream.finalResponse();
    const streamed = final.output.filter((i) => i.type === 'function_call');
    assert.equal(streamed.length, 1);
    checkCall(streamed[0]);
    assert.equal(streamed[0].arguments, calls[0].arguments);
    assert.equal(args, calls[0].arguments);
    assert.deepEqual(done, [calls[0].arguments]);

    // The round trip: the call and its output as input items.
    const next = await client.responses.create({
      model: 'kjv-tiny', tools, max_output_tokens: 8, temperature: 0,
      input: [{ role: 'user', content: 'Weather in Ur?' }, calls[0],
              { type: 'function_call_output', call_id: calls[0].call_id, output: 'Hot.' }],
    });
    assert.ok(['completed', 'incomplete'].includes(next.status), next.status);
    assert.ok(next.output.length >= 1);
  },

  // text.format json_schema: the output is a document of the schema (output_text parses).
  async textFormatJsonSchema() {
    const schema = { type: 'object', properties: { verse: { type: 'integer', minimum: 1, maximum: 176 },
                                                   word: { type: 'string', enum: ['light', 'water'] } },
                     required: ['verse', 'word'], additionalProperties: false };
    const r = await client.responses.create({
      model: 'kjv-tiny', input: 'A verse?', max_output_tokens: 300, temperature: 1, seed: 2,
      text: { format: { type: 'json_schema', name: 'v', schema, strict: true } },
    });
    assert.equal(r.status, 'completed');
    const doc = JSON.parse(r.output_text);
    assert.deepEqual(Object.keys(doc), ['verse', 'word']);
    assert.ok(Number.isInteger(doc.verse) && doc.verse >= 1 && doc.verse <= 176, r.output_text);
    assert.ok(['light', 'water'].includes(doc.word));
  },

  async refusedFieldsNameTheirParam() {
    for (const [extra, param] of [[{ store: true }, 'store'], [{ previous_response_id: 'resp_0' }, 'previous_response_id'],
                                  [{ background: true }, 'background']]) {
      await assert.rejects(
        client.responses.create({ model: 'kjv-tiny', input: 'x', max_output_tokens: 2, ...extra }),
        (e) => e instanceof OpenAI.BadRequestError && e.param === param,
        `${JSON.stringify(extra)} should be a 400 naming ${param}`);
    }
  },
};

await runCases('openai_responses_test', tests);
