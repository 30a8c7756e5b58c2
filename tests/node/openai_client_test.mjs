// The official OpenAI Node client against a running `spindle serve`:
//   node tests/node/openai_client_test.mjs http://127.0.0.1:PORT/v1 [API_KEY]
// Runs chat (whole), chat (streamed deltas, with a usage chunk), completions (whole, streamed, and
// echo with logprobs), tool calls (whole, and streamed through the client's stream helper),
// embeddings (base64 and float) and models.list, the no-op fields and the refused ones (a 400
// naming the field), asserts what
// comes back, and exits non-zero on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { openaiClient, runCases } from './harness.mjs';

const client = openaiClient('openai_client_test');
const kMaxTokens = 8;

function checkUsage(usage, what) {
  assert.ok(usage, `${what}: usage is missing`);
  assert.ok(usage.prompt_tokens > 0, `${what}: prompt_tokens ${usage.prompt_tokens}`);
  assert.ok(usage.completion_tokens > 0 && usage.completion_tokens <= kMaxTokens,
            `${what}: completion_tokens ${usage.completion_tokens}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${what}: total_tokens`);
}

const tests = {
  async models() {
    const page = await client.models.list();
    assert.ok(page.data.length >= 1, 'no model listed');
    assert.equal(page.data[0].object, 'model');
  },

  async chat() {
    const r = await client.chat.completions.create({
      model: 'kjv-tiny',
      messages: [{ role: 'user', content: 'Who made the heaven and the earth?' }],
      max_tokens: kMaxTokens,
      temperature: 0,
      ignore_eos: true,
    });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.message.role, 'assistant');
    assert.ok(typeof c.message.content === 'string' && c.message.content.length > 0, 'empty content');
    assert.equal(c.finish_reason, 'length');
    checkUsage(r.usage, 'chat');
    assert.equal(r.usage.completion_tokens, kMaxTokens);
  },

  async chatStream() {
    const stream = await client.chat.completions.create({
      model: 'kjv-tiny',
      messages: [{ role: 'user', content: 'Who made the heaven and the earth?' }],
      max_tokens: kMaxTokens,
      stream: true,
      stream_options: { include_usage: true },
    });
    let role = null, content = '', finish = null, usage = null, numChunks = 0;
    for await (const chunk of stream) {
      ++numChunks;
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        if (choice.delta?.role) role = choice.delta.role;
        if (choice.delta?.content) content += choice.delta.content;
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.ok(numChunks >= 2, `only ${numChunks} chunks`);
    assert.equal(role, 'assistant');
    assert.ok(content.length > 0, 'no content streamed');
    assert.ok(finish === 'stop' || finish === 'length', `finish_reason ${finish}`);
    checkUsage(usage, 'chat stream');
  },

  async completion() {
    const r = await client.completions.create({
      model: 'kjv-tiny',
      prompt: 'And God said',
      max_tokens: kMaxTokens,
      temperature: 0,
    });
    assert.equal(r.object, 'text_completion');
    assert.ok(r.choices[0].text.length > 0, 'empty text');
    assert.ok(r.choices[0].finish_reason === 'stop' || r.choices[0].finish_reason === 'length');
    checkUsage(r.usage, 'completion');
  },

  async completionStream() {
    const stream = await client.completions.create({
      model: 'kjv-tiny',
      prompt: 'And God said',
      max_tokens: kMaxTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '', finish = null, usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        text += choice.text;
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.ok(text.length > 0, 'no text streamed');
    assert.ok(finish === 'stop' || finish === 'length', `finish_reason ${finish}`);
    checkUsage(usage, 'completion stream');
  },

  // Fields documented as no-ops: the same greedy text and usage as without them.
  async noOpFieldsChangeNothing() {
    const base = {
      model: 'kjv-tiny',
      messages: [{ role: 'user', content: 'Who made the heaven?' }],
      max_tokens: kMaxTokens,
      temperature: 0,
    };
    const plain = await client.chat.completions.create(base);
    const noop = await client.chat.completions.create({
      ...base, user: 'user-1', metadata: { project: 'spindle' }, store: false, service_tier: 'auto',
      messages: [{ role: 'user', content: 'Who made the heaven?', name: 'alice' }],
    });
    assert.equal(noop.choices[0].message.content, plain.choices[0].message.content);
    assert.deepEqual(noop.usage, plain.usage);
  },

  // Structured output through the client: beta.chat.completions.parse (openai 4.x) with a json_schema response
  // format (strict, as zodResponseFormat sends it) parses the content into an object with the
  // schema's keys; json_object gives a parsable object; streaming deltas join into the same kind.
  async structuredOutputParses() {
    const schema = {
      type: 'object',
      properties: { verse: { type: 'integer', minimum: 1, maximum: 176 }, word: { type: 'string', enum: ['light', 'water'] } },
      required: ['verse', 'word'],
      additionalProperties: false,
    };
    const response_format = { type: 'json_schema', json_schema: { name: 'v', schema, strict: true } };
    for (const seed of [1, 2, 3]) {
      const r = await client.beta.chat.completions.parse({
        model: 'kjv-tiny', messages: [{ role: 'user', content: 'A verse?' }], max_tokens: 300, temperature: 1, seed,
        response_format,
      });
      assert.equal(r.choices[0].finish_reason, 'stop');
      const parsed = r.choices[0].message.parsed;
      assert.deepEqual(Object.keys(parsed), ['verse', 'word']);
      assert.ok(Number.isInteger(parsed.verse) && parsed.verse >= 1 && parsed.verse <= 176, JSON.stringify(parsed));
      assert.ok(['light', 'water'].includes(parsed.word));
    }
    const obj = await client.chat.completions.create({
      model: 'kjv-tiny', messages: [{ role: 'user', content: 'JSON?' }], max_tokens: 300, temperature: 0.7, seed: 5,
      response_format: { type: 'json_object' },
    });
    if (obj.choices[0].finish_reason === 'stop') {
      const value = JSON.parse(obj.choices[0].message.content);
      assert.equal(typeof value, 'object');
      assert.ok(value !== null && !Array.isArray(value));
    } else {
      assert.equal(obj.choices[0].finish_reason, 'length');
      assert.ok(obj.choices[0].message.content.trimStart().startsWith('{'));
    }
    const stream = await client.chat.completions.create({
      model: 'kjv-tiny', messages: [{ role: 'user', content: 'A verse?' }], max_tokens: 300, temperature: 1, seed: 9,
      response_format, stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.deepEqual(Object.keys(JSON.parse(text)), ['verse', 'word']);
  },

  // Tool calls on kjv-tiny (its template teaches no tool syntax: the generic format, the answer
  // constrained by the tools' schemas), whole and streamed: the client's stream helper assembles
  // the deltas (tool_calls.function.arguments.delta / .done events, finalChatCompletion) into the
  // calls of the whole response with the same seed; arguments are JSON objects of the schemas.
  async toolCallsWholeAndStreamed() {
    const tools = [
      { type: 'function', function: { name: 'get_weather', strict: true, parameters: { type: 'object',
        properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
        required: ['city', 'days'], additionalProperties: false } } },
      { type: 'function', function: { name: 'amen', parameters: { type: 'object', properties: { loud: { type: 'boolean' } },
        required: ['loud'], additionalProperties: false } } },
    ];
    const checkArguments = (name, text) => {
      const args = JSON.parse(text);
      if (name === 'get_weather') {
        assert.deepEqual(Object.keys(args), ['city', 'days']);
        assert.ok(typeof args.city === 'string' && [...args.city].length <= 8, text);
        assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, text);
      } else {
        assert.equal(name, 'amen');
        assert.deepEqual(Object.keys(args), ['loud']);
        assert.equal(typeof args.loud, 'boolean');
      }
    };
    for (const seed of [1, 2, 3]) {
      const params = {
        // One call: the tools' system message takes ~380 of kjv-tiny's 512 tokens.
        model: 'kjv-tiny', messages: [{ role: 'user', content: 'Weather in Ur?' }], tools, tool_choice: 'required',
        parallel_tool_calls: false, max_tokens: 120, temperature: 1, seed,
      };
      const whole = await client.chat.completions.create(params);
      assert.equal(whole.choices[0].finish_reason, 'tool_calls');
      const expected = whole.choices[0].message.tool_calls;
      assert.ok(expected.length >= 1);
      const stream = client.beta.chat.completions.stream({ ...params, stream: true });
      const deltas = new Map();
      const done = [];
      stream.on('tool_calls.function.arguments.delta', (e) => deltas.set(e.index, (deltas.get(e.index) ?? '') + e.arguments_delta));
      stream.on('tool_calls.function.arguments.done', (e) => done.push(e));
      const final = await stream.finalChatCompletion();
      assert.equal(final.choices[0].finish_reason, 'tool_calls');
      const calls = final.choices[0].message.tool_calls;
      // (the helper adds parsed_arguments for strict tools)
      const nameAndArguments = (c) => ({ name: c.function.name, arguments: c.function.arguments });
      assert.deepEqual(calls.map(nameAndArguments), expected.map(nameAndArguments), `seed ${seed}`);
      assert.equal(done.length, calls.length);
      calls.forEach((c, i) => {
        assert.match(c.id, /^call_[A-Za-z0-9]{24}$/);
        assert.equal(c.type, 'function');
        checkArguments(c.function.name, c.function.arguments);
        assert.equal(deltas.get(i), c.function.arguments);
        assert.equal(done[i].arguments, c.function.arguments);
        if (c.function.name === 'get_weather') assert.deepEqual(done[i].parsed_arguments, JSON.parse(c.function.arguments));
      });
    }
    // tool_choice auto: calls, or a reply as content.
    const r = await client.chat.completions.create({
      model: 'kjv-tiny', messages: [{ role: 'user', content: 'Weather in Ur?' }], tools, max_tokens: 60, temperature: 1, seed: 4,
    });
    const c = r.choices[0];
    if (c.finish_reason === 'tool_calls') {
      for (const call of c.message.tool_calls) checkArguments(call.function.name, call.function.arguments);
    } else {
      assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
      assert.equal(typeof c.message.content, 'string');
    }
  },

  // Refused and unknown fields: a 400 whose param names the field, as the client reads it.
  async refusedFieldsNameTheirParam() {
    const messages = [{ role: 'user', content: 'Amen.' }];
    const cases = [
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', not: {} } } } },
        'response_format.json_schema.schema'],
      [{ response_format: { type: 'json_object' }, guided_regex: 'a+' }, 'guided_regex'],
      // kjv-tiny's template teaches no tool syntax: the generic format, whose grammar reads the schemas.
      [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', patternProperties: { a: {} } } } }] },
        'tools[0].function.parameters'],
      [{ tool_choice: 'required' }, 'tool_choice'],
      [{ store: true }, 'store'],
      [{ foo_unknown: 1 }, 'foo_unknown'],
    ];
    for (const [extra, param] of cases) {
      await assert.rejects(
        client.chat.completions.create({ model: 'kjv-tiny', messages, max_tokens: 2, ...extra }),
        (e) => e instanceof OpenAI.BadRequestError && e.param === param,
        `${JSON.stringify(extra)} should be a 400 naming ${param}`);
    }
    await assert.rejects(
      client.completions.create({ model: 'kjv-tiny', prompt: 'x', max_tokens: 2, best_of: 3 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'best_of');
    await assert.rejects(
      client.embeddings.create({ model: 'kjv-tiny', input: 'x', encoding_format: 'int8' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'encoding_format');
    await assert.rejects(
      client.embeddings.create({ model: 'kjv-tiny', input: ['x', ''] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[1]');
  },

  // echo + logprobs: the prompt's tokens first (the first one's logprob null), then the output's.
  async completionEchoLogprobs() {
    const prompt = 'In the beginning God';
    const r = await client.completions.create({ model: 'kjv-tiny', prompt, max_tokens: 3, temperature: 0,
                                                ignore_eos: true, echo: true, logprobs: 2 });
    const c = r.choices[0];
    assert.ok(c.text.startsWith(prompt), 'the text starts with the prompt');
    const lp = c.logprobs;
    assert.equal(lp.tokens.length, r.usage.prompt_tokens + 3);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.equal(lp.text_offset[0], 0);
    for (let i = 1; i < lp.tokens.length; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0, `token_logprobs[${i}] ${lp.token_logprobs[i]}`);
      assert.equal(Object.keys(lp.top_logprobs[i]).length, 2, `top_logprobs[${i}]`);
      assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1], 'text_offset grows');
    }
  },

  // The client asks for base64 by default and decodes it; float is the same numbers.
  async embeddings() {
    const input = ['In the beginning God created the heaven', 'and the earth.'];
    const r = await client.embeddings.create({ model: 'kjv-tiny', input });
    assert.equal(r.object, 'list');
    assert.equal(r.data.length, 2);
    const f = await client.embeddings.create({ model: 'kjv-tiny', input, encoding_format: 'float' });
    for (let i = 0; i < 2; ++i) {
      const e = r.data[i].embedding;
      assert.equal(r.data[i].index, i);
      assert.equal(e.length, f.data[i].embedding.length);
      assert.ok(e.length > 16, `${e.length} values`);
      const norm = Math.sqrt(e.reduce((a, x) => a + x * x, 0));
      assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
      for (let j = 0; j < e.length; ++j) assert.ok(Math.abs(e[j] - f.data[i].embedding[j]) < 1e-7, `value ${j}`);
    }
    assert.ok(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens, 'usage');
    const d = await client.embeddings.create({ model: 'kjv-tiny', input: input[0], dimensions: 16 });
    assert.equal(d.data[0].embedding.length, 16);
  },

  async badRequestIsAnApiError() {
    await assert.rejects(
      client.completions.create({ model: 'kjv-tiny', prompt: 'x', max_tokens: -1 }),
      (e) => e instanceof OpenAI.APIError && e.status === 400);
    await assert.rejects(
      client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }),
      (e) => e instanceof OpenAI.NotFoundError);
  },
};

await runCases('openai_client_test', tests);
