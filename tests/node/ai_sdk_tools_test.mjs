// The Vercel AI SDK (`ai` 6 with `@ai-sdk/openai-compatible` 2) against a running `spindle serve`
// of the embedded kjv-tiny with Mistral-Nemo-Instruct-2407's chat template (its tools section and
// [TOOL_CALLS] format; tests/server/server_tools_test.cc starts it):
//   node tests/node/ai_sdk_tools_test.mjs http://127.0.0.1:PORT/v1 [API_KEY]
// kjv-tiny never learned a tool format, so every call here is forced (toolChoice 'required' or a
// named tool: the grammar of the tool's schema) and must come back through the SDK as a parsed
// call whose input satisfies the declared schema:
//   generateText   a forced call, executed by the SDK (toolResults), finishReason 'tool-calls', and
//                  a named tool; then the call and its result as history (role 'tool') with
//                  toolChoice 'none': a text answer
//   streamText     the same forced call streamed: tool-input-start / -delta / -end parts whose
//                  deltas concatenate to the call's input, then the tool-call part, equal to
//                  generateText's call with the same seed
//   generateObject an object of a bounded schema (response_format json_schema)
// One tool per request: Mistral-Nemo's tools section of one tool takes ~240 of kjv-tiny's 512 tokens.
import assert from 'node:assert/strict';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, jsonSchema, streamText, tool } from 'ai';

import { runCases, server } from './harness.mjs';

const { baseURL, apiKey } = server('ai_sdk_tools_test');
const provider = createOpenAICompatible({ name: 'spindle', baseURL, apiKey, includeUsage: true,
                                           supportsStructuredOutputs: true });
const model = provider.chatModel('kjv-tiny');

// Bounded, so that kjv-tiny's call ends well inside the context (as openai_client_test.mjs's).
const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'], additionalProperties: false,
};
const amenSchema = {
  type: 'object', properties: { loud: { type: 'boolean' } }, required: ['loud'], additionalProperties: false,
};
const executed = [];
const weather = tool({
  description: 'The weather of a city',
  inputSchema: jsonSchema(weatherSchema),
  execute: async ({ city, days }) => { executed.push({ city, days }); return { city, days, sky: 'clear' }; },
});
const amen = tool({ description: 'Says amen', inputSchema: jsonSchema(amenSchema) });
const common = { model, maxOutputTokens: 240, temperature: 1, maxRetries: 0 };

function checkWeather(input) {
  assert.deepEqual(Object.keys(input), ['city', 'days'], JSON.stringify(input));
  assert.ok(typeof input.city === 'string' && [...input.city].length <= 8, JSON.stringify(input));
  assert.ok(Number.isInteger(input.days) && input.days >= 1 && input.days <= 7, JSON.stringify(input));
}

// The Mistral family's call ids: 9 alphanumerics (its templates refuse others in history).
const kMistralId = /^[A-Za-z0-9]{9}$/;

const cases = {
  async generateTextForcedCallIsExecuted() {
    for (const seed of [1, 2, 3]) {
      executed.length = 0;
      const r = await generateText({ ...common, seed, prompt: 'Weather in Ur?', tools: { weather },
                                     toolChoice: 'required' });
      assert.equal(r.finishReason, 'tool-calls', `seed ${seed}`);
      assert.equal(r.toolCalls.length, 1, `seed ${seed}`);
      const call = r.toolCalls[0];
      assert.equal(call.toolName, 'weather');
      assert.match(call.toolCallId, kMistralId);
      checkWeather(call.input);
      assert.deepEqual(executed, [call.input], 'the SDK executed the parsed call');
      assert.equal(r.toolResults.length, 1);
      assert.deepEqual(r.toolResults[0].output, { ...call.input, sky: 'clear' });
      assert.ok(r.usage.inputTokens > 200 && r.usage.outputTokens > 0, JSON.stringify(r.usage));
    }
  },

  async generateTextNamedTool() {
    const r = await generateText({ ...common, seed: 5, prompt: 'Say amen.', tools: { amen },
                                   toolChoice: { type: 'tool', toolName: 'amen' } });
    assert.equal(r.finishReason, 'tool-calls');
    assert.equal(r.toolCalls.length, 1);
    assert.equal(r.toolCalls[0].toolName, 'amen');
    assert.deepEqual(Object.keys(r.toolCalls[0].input), ['loud']);
    assert.equal(typeof r.toolCalls[0].input.loud, 'boolean');
  },

  // The forced call and its result as history (an assistant tool-call part, a role 'tool' message:
  // the template renders [TOOL_CALLS] and [TOOL_RESULTS] with the 9-character id), answered as text.
  async toolResultInHistory() {
    const first = await generateText({ ...common, seed: 1, prompt: 'Weather in Ur?', tools: { weather },
                                       toolChoice: 'required' });
    assert.equal(first.toolCalls.length, 1);
    const messages = [{ role: 'user', content: 'Weather in Ur?' }, ...first.response.messages];
    assert.deepEqual(messages.map((m) => m.role), ['user', 'assistant', 'tool']);
    const r = await generateText({ ...common, seed: 1, maxOutputTokens: 8, messages, tools: { weather },
                                   toolChoice: 'none' });
    assert.equal(r.toolCalls.length, 0);
    assert.equal(r.finishReason, 'length');
    assert.ok(r.text.length > 0, 'no text');
    assert.ok(r.usage.inputTokens > first.usage.inputTokens, 'the history reached the prompt');
  },

  async streamTextForcedCall() {
    for (const seed of [1, 2]) {
      const whole = await generateText({ ...common, seed, prompt: 'Weather in Ur?', tools: { weather },
                                         toolChoice: 'required' });
      const result = streamText({ ...common, seed, prompt: 'Weather in Ur?', tools: { weather },
                                  toolChoice: 'required' });
      const types = [];
      let deltas = '';
      let call;
      for await (const part of result.fullStream) {
        types.push(part.type);
        if (part.type === 'tool-input-delta') deltas += part.delta;
        if (part.type === 'tool-call') call = part;
        if (part.type === 'error') throw part.error;
      }
      assert.ok(call, `no tool-call part: ${types.join(' ')}`);
      assert.equal(call.toolName, 'weather');
      assert.match(call.toolCallId, kMistralId);
      checkWeather(call.input);
      assert.deepEqual(call.input, whole.toolCalls[0].input, `seed ${seed}: streamed vs whole`);
      assert.deepEqual(JSON.parse(deltas), call.input, 'the input deltas make the call');
      for (const t of ['tool-input-start', 'tool-input-delta', 'tool-input-end', 'tool-call', 'tool-result']) {
        assert.ok(types.includes(t), `no ${t} part: ${types.join(' ')}`);
      }
      assert.ok(types.indexOf('tool-input-start') < types.indexOf('tool-call'));
      assert.equal(await result.finishReason, 'tool-calls');
      const usage = await result.usage;
      assert.ok(usage.inputTokens > 200 && usage.outputTokens > 0, JSON.stringify(usage));
    }
  },

  async generateObjectFollowsTheSchema() {
    const schema = {
      type: 'object',
      properties: { verse: { type: 'integer', minimum: 1, maximum: 31 }, word: { type: 'string', maxLength: 8 } },
      required: ['verse', 'word'], additionalProperties: false,
    };
    for (const seed of [1, 2]) {
      const r = await generateObject({ ...common, seed, schema: jsonSchema(schema), schemaName: 'verse',
                                       prompt: 'In the beginning God created the heaven and the earth.' });
      assert.deepEqual(Object.keys(r.object), ['verse', 'word'], JSON.stringify(r.object));
      assert.ok(Number.isInteger(r.object.verse) && r.object.verse >= 1 && r.object.verse <= 31);
      assert.ok(typeof r.object.word === 'string' && [...r.object.word].length <= 8);
      assert.equal(r.finishReason, 'stop');
    }
  },
};

await runCases('ai_sdk_tools_test', cases);
