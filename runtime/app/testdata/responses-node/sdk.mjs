// The official Node SDK (openai) against the gateway's Responses API, over a real socket.
// Run by runtime/app TestResponsesNode; by hand:
//   BASE_URL=http://127.0.0.1:8080/v1 API_KEY=sk-... MODE=translated node sdk.mjs
// MODE is how the gateway serves the model: "translated" (onto the scripted chat-only upstream of
// responses_test.go, which answers "<n> messages; last: <text>", calls get_weather when given
// tools and answers "The weather: <output>" given its output) or "native" (the scripted upstream's
// own /v1/responses, which answers "native: <n> input items"; no tools there).
// Prints a JSON summary on stdout; every failed check is written to stderr and the exit status is 1.
import OpenAI, { APIError, NotFoundError, BadRequestError } from 'openai';

const { BASE_URL, API_KEY, MODE } = process.env;
if (!BASE_URL || !API_KEY || !['translated', 'native'].includes(MODE)) {
  console.error('sdk.mjs: set BASE_URL, API_KEY and MODE (translated or native)');
  process.exit(2);
}
const MODEL = process.env.MODEL || 'agent-model';
const client = new OpenAI({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 0, timeout: 20_000 });

// What the scripted upstream answers for a conversation of n messages (input items) ending in text.
const answer = (n, text) => (MODE === 'native' ? `native: ${n} input items` : `${n} messages; last: ${text}`);

class CheckError extends Error {}
function check(cond, msg, got) {
  if (!cond) throw new CheckError(got === undefined ? msg : `${msg} (got ${JSON.stringify(got)})`);
}
function eq(got, want, what) {
  check(JSON.stringify(got) === JSON.stringify(want), `${what}: want ${JSON.stringify(want)}`, got);
}
// An output without the fields the SDK's parser adds to finalResponse() (parsed, parsed_arguments).
const unparsed = (output) => JSON.parse(JSON.stringify(output, (k, v) => (k === 'parsed' || k === 'parsed_arguments' ? undefined : v)));
// The text of a response's message items, as the SDK's output_text helper joins it.
function textOf(resp) {
  return resp.output
    .filter((o) => o.type === 'message')
    .flatMap((o) => o.content)
    .filter((c) => c.type === 'output_text')
    .map((c) => c.text)
    .join('');
}
async function rejects(promise, Cls, status, what) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof Cls, `${what}: want ${Cls.name}`, `${e?.constructor?.name}: ${e?.message}`);
    eq(e.status, status, `${what}: status`);
    return e;
  }
  throw new CheckError(`${what}: resolved, want ${Cls.name} (${status})`);
}

// The events of the SDK's union (ResponseStreamEvent) a gateway may send for text and function calls.
const KNOWN = new Set([
  'response.created', 'response.in_progress', 'response.queued', 'response.completed', 'response.failed', 'response.incomplete',
  'response.output_item.added', 'response.output_item.done', 'response.content_part.added', 'response.content_part.done',
  'response.output_text.delta', 'response.output_text.done', 'response.output_text.annotation.added',
  'response.refusal.delta', 'response.refusal.done',
  'response.function_call_arguments.delta', 'response.function_call_arguments.done',
  'response.reasoning_text.delta', 'response.reasoning_text.done',
  'response.reasoning_summary_part.added', 'response.reasoning_summary_part.done',
  'response.reasoning_summary_text.delta', 'response.reasoning_summary_text.done', 'error',
]);

// Checks a raw event sequence as the strict clients need it: response.created first at sequence 0,
// sequence numbers +1 with no gaps, only known types, one terminal event last, output_item.added at
// the next output index, content_part.added before a delta, deltas and done events naming the id of
// their item, the terminal response carrying every item with the same ids. Returns the deltas.
function checkEvents(events, what) {
  check(events.length > 0, `${what}: no events`);
  eq(events[0].type, 'response.created', `${what}: first event`);
  events.forEach((ev, i) => {
    eq(ev.sequence_number, i, `${what}: sequence_number of event ${i} (${ev.type})`);
    check(KNOWN.has(ev.type), `${what}: event type outside the SDK's union`, ev.type);
  });
  const last = events[events.length - 1];
  eq(last.type, 'response.completed', `${what}: last event`);
  const terminal = events.filter((e) => ['response.completed', 'response.failed', 'response.incomplete'].includes(e.type));
  eq(terminal.length, 1, `${what}: terminal events`);
  for (const ev of events.filter((e) => ['response.created', 'response.in_progress'].includes(e.type))) {
    eq(ev.response?.status, 'in_progress', `${what}: ${ev.type} response.status`);
    eq(ev.response?.output, [], `${what}: ${ev.type} response.output`);
  }
  eq(last.response?.status, 'completed', `${what}: response.completed response.status`);
  const items = []; // by output_index: {id, type, call_id, parts, text, args, done}
  const deltas = { text: '', arguments: '' };
  for (const ev of events) {
    const it = items[ev.output_index];
    switch (ev.type) {
      case 'response.output_item.added':
        eq(ev.output_index, items.length, `${what}: output_item.added output_index`);
        check(items.every((x) => x.done), `${what}: output_item.added while item ${items.length - 1} is open`);
        check(typeof ev.item?.id === 'string' && ev.item.id !== '', `${what}: output_item.added item.id`, ev.item?.id);
        eq(ev.item.status, 'in_progress', `${what}: output_item.added item.status`);
        if (ev.item.type === 'message') eq(ev.item.content, [], `${what}: output_item.added message content`);
        if (ev.item.type === 'function_call') {
          check(ev.item.call_id, `${what}: output_item.added function_call call_id`, ev.item.call_id);
          eq(ev.item.arguments, '', `${what}: output_item.added function_call arguments`);
        }
        check(!items.some((x) => x.id === ev.item.id), `${what}: output_item.added item.id repeats an earlier item's`, ev.item.id);
        items.push({ id: ev.item.id, type: ev.item.type, call_id: ev.item.call_id, parts: 0, text: '', args: '', done: false });
        break;
      case 'response.content_part.added':
        check(it && !it.done, `${what}: content_part.added for no open item`, ev.output_index);
        eq(ev.item_id, it.id, `${what}: content_part.added item_id`);
        eq(ev.content_index, it.parts, `${what}: content_part.added content_index`);
        eq([ev.part?.type, ev.part?.text, ev.part?.annotations], ['output_text', '', []], `${what}: content_part.added part's type, text, annotations`);
        it.parts++;
        break;
      case 'response.output_text.delta':
        check(it && !it.done && it.type === 'message', `${what}: output_text.delta for no open message`, ev.output_index);
        eq(ev.item_id, it.id, `${what}: output_text.delta item_id`);
        check(ev.content_index < it.parts, `${what}: output_text.delta before its content_part.added`, ev.content_index);
        check(Array.isArray(ev.logprobs), `${what}: output_text.delta logprobs is an array`, ev.logprobs);
        it.text += ev.delta;
        deltas.text += ev.delta;
        break;
      case 'response.output_text.done':
        eq(ev.item_id, it?.id, `${what}: output_text.done item_id`);
        eq(ev.text, it.text, `${what}: output_text.done text == the deltas`);
        break;
      case 'response.content_part.done':
        eq(ev.item_id, it?.id, `${what}: content_part.done item_id`);
        eq([ev.part?.type, ev.part?.text, ev.part?.annotations], ['output_text', it.text, []], `${what}: content_part.done part's type, text, annotations`);
        break;
      case 'response.function_call_arguments.delta':
        check(it && !it.done && it.type === 'function_call', `${what}: function_call_arguments.delta for no open call`, ev.output_index);
        eq(ev.item_id, it.id, `${what}: function_call_arguments.delta item_id`);
        it.args += ev.delta;
        deltas.arguments += ev.delta;
        break;
      case 'response.function_call_arguments.done':
        eq(ev.item_id, it?.id, `${what}: function_call_arguments.done item_id`);
        eq(ev.arguments, it.args, `${what}: function_call_arguments.done arguments == the deltas`);
        break;
      case 'response.output_item.done':
        check(it && !it.done, `${what}: output_item.done for no open item`, ev.output_index);
        eq(ev.item.id, it.id, `${what}: output_item.done item.id`);
        eq(ev.item.status, 'completed', `${what}: output_item.done item.status`);
        if (it.type === 'message') eq(textOf({ output: [ev.item] }), it.text, `${what}: output_item.done message text`);
        if (it.type === 'function_call') {
          eq(ev.item.call_id, it.call_id, `${what}: output_item.done call_id`);
          eq(ev.item.arguments, it.args, `${what}: output_item.done arguments`);
        }
        it.done = true;
        break;
    }
  }
  check(items.every((x) => x.done), `${what}: an item was never done`);
  eq(last.response.output.map((o) => o.id), items.map((x) => x.id), `${what}: the terminal response's output ids`);
  eq(textOf(last.response), deltas.text, `${what}: the terminal response's text == the deltas`);
  return { deltas, final: last.response };
}

const summary = { mode: MODE, steps: {} };
const failures = [];
async function step(name, fn) {
  try {
    summary.steps[name] = (await fn()) ?? 'ok';
  } catch (e) {
    const msg = e instanceof CheckError ? e.message : `${e?.constructor?.name}: ${e?.message}${e?.error ? ' ' + JSON.stringify(e.error) : ''}`;
    failures.push(`${name}: ${msg}`);
    summary.steps[name] = { failed: msg };
  }
}

let r1, streamed;

await step('create', async () => {
  r1 = await client.responses.create({ model: MODEL, input: 'Hello' });
  eq(r1.object, 'response', 'object');
  check(typeof r1.id === 'string' && r1.id.startsWith('resp_'), 'id starts with resp_', r1.id);
  eq(r1.status, 'completed', 'status');
  eq(r1.model, MODEL, 'model');
  eq(r1.output.length, 1, 'output items');
  eq(r1.output[0].type, 'message', 'output[0].type');
  eq(r1.output[0].role, 'assistant', 'output[0].role');
  eq(r1.output_text, answer(1, 'Hello'), 'output_text');
  check(r1.usage?.input_tokens > 0, 'usage.input_tokens > 0', r1.usage);
  check(r1.usage?.output_tokens > 0, 'usage.output_tokens > 0', r1.usage);
  check(r1.usage?.input_tokens_details && r1.usage?.output_tokens_details, 'usage details objects', r1.usage);
  eq(r1.usage.total_tokens, r1.usage.input_tokens + r1.usage.output_tokens, 'usage.total_tokens');
  return { id: r1.id, text: r1.output_text };
});

await step('create mixed input', async () => {
  // A typed message with content parts and an untyped one, and instructions. (The scripted chat
  // upstream echoes only a string content: the text parts come last as a string.)
  const r = await client.responses.create({
    model: MODEL,
    instructions: 'Be brief.',
    input: [
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'first' }] },
      { role: 'user', content: 'second' },
    ],
  });
  eq(r.output_text, MODE === 'native' ? answer(2) : answer(3, 'second'), 'output_text');
  // The native fake answers a fixed response; a translated one echoes the request's instructions.
  if (MODE === 'translated') eq(r.instructions, 'Be brief.', 'instructions echoed');
  const desc = await client.responses.inputItems.list(r.id);
  eq(desc.data.map((i) => [i.type, i.role, i.content]), [['message', 'user', [{ type: 'input_text', text: 'second' }]], ['message', 'user', [{ type: 'input_text', text: 'first' }]]], 'input_items, newest first by default');
  check(desc.data.every((i) => typeof i.id === 'string' && i.id !== ''), 'input items have ids', desc.data);
  eq(desc.has_more, false, 'input_items has_more');
  const asc = await client.responses.inputItems.list(r.id, { order: 'asc' });
  eq(asc.data.map((i) => i.id), desc.data.map((i) => i.id).reverse(), "input_items order 'asc' reverses");
  return { id: r.id, text: r.output_text };
});

await step('stream (raw for await)', async () => {
  const stream = await client.responses.create({ model: MODEL, input: 'Stream it', stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const { deltas, final } = checkEvents(events, 'raw stream');
  eq(deltas.text, answer(1, 'Stream it'), 'concatenated deltas');
  check(events.filter((e) => e.type === 'response.output_text.delta').length >= 1, 'at least one text delta');
  streamed = final;
  return { types: events.map((e) => e.type), deltas: events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta), id: final.id };
});

await step('stream helper finalResponse', async () => {
  check(r1, 'needs the create step');
  const s = client.responses.stream({ model: MODEL, previous_response_id: r1.id, input: 'And again' });
  let snapshots = '';
  const types = [];
  s.on('event', (ev) => types.push(ev.type));
  s.on('response.output_text.delta', (ev) => (snapshots = ev.snapshot));
  const final = await s.finalResponse();
  const want = answer(3, 'And again');
  eq(final.output_text, want, 'finalResponse().output_text');
  eq(snapshots, want, 'the last output_text.delta snapshot');
  eq(final.status, 'completed', 'finalResponse().status');
  eq(final.previous_response_id, r1.id, 'finalResponse().previous_response_id');
  const got = await client.responses.retrieve(final.id);
  eq(got.output, unparsed(final.output), 'retrieve(id).output == finalResponse().output');
  eq(got.output_text, want, 'retrieve(id).output_text');
  return { id: final.id, text: final.output_text, types };
});

await step('retrieve', async () => {
  check(r1 && streamed, 'needs the create and stream steps');
  const got = await client.responses.retrieve(r1.id);
  for (const k of ['id', 'object', 'created_at', 'status', 'model', 'output', 'usage', 'output_text']) eq(got[k], r1[k], `retrieve(id).${k} == create's`);
  eq(got, r1, "retrieve(id) == create's response");
  const gs = await client.responses.retrieve(streamed.id);
  eq(gs.output, streamed.output, "retrieve(streamed id).output == response.completed's");
  eq(gs.status, 'completed', 'retrieve(streamed id).status');
  eq(unparsed(gs), unparsed({ ...streamed, output_text: gs.output_text }), "retrieve(streamed id) == response.completed's response");
  return { id: got.id };
});

await step('input_items', async () => {
  check(r1, 'needs the create step');
  const page = await client.responses.inputItems.list(r1.id);
  eq(page.data.length, 1, 'input items');
  const [item] = page.data;
  eq(item.type, 'message', 'input item type');
  eq(item.role, 'user', 'input item role');
  eq(item.content, [{ type: 'input_text', text: 'Hello' }], 'input item content');
  check(typeof item.id === 'string' && item.id !== '', 'input item id', item.id);
  const all = [];
  for await (const it of client.responses.inputItems.list(r1.id)) all.push(it.id);
  eq(all, [item.id], 'input items by auto-pagination');
  return { items: page.data.map((i) => i.id) };
});

await step('errors', async () => {
  const e = await rejects(client.responses.create({ model: MODEL, previous_response_id: 'resp_nope', input: 'x' }), BadRequestError, 400, 'unknown previous_response_id');
  eq(e.param, 'previous_response_id', 'unknown previous_response_id: param');
  eq(e.code, 'previous_response_not_found', 'unknown previous_response_id: code');
  eq(e.type, 'invalid_request_error', 'unknown previous_response_id: type');
  await rejects(client.responses.retrieve('resp_nope'), NotFoundError, 404, 'retrieve of an unknown id');
  return 'ok';
});

await step('delete', async () => {
  check(r1, 'needs the create step');
  const del = await client.responses.delete(r1.id);
  check(del === undefined || del === null || typeof del === 'object', 'delete resolves', del);
  await rejects(client.responses.retrieve(r1.id), NotFoundError, 404, 'retrieve after delete');
  await rejects(client.responses.inputItems.list(r1.id), NotFoundError, 404, 'input_items after delete');
  await rejects(client.responses.delete(r1.id), NotFoundError, 404, 'delete twice');
  return { deleted: r1.id };
});

if (MODE === 'translated') {
  const tools = [{
    type: 'function', name: 'get_weather', description: 'The weather in a city', strict: false,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  }];

  await step('function tool round trip (previous_response_id)', async () => {
    const r3 = await client.responses.create({ model: MODEL, tools, input: 'Weather in Paris?' });
    eq(r3.status, 'completed', 'status');
    const calls = r3.output.filter((o) => o.type === 'function_call');
    eq(calls.length, 1, 'function_call items');
    const [call] = calls;
    eq(call.call_id, 'call_w1', 'call_id (the upstream\'s, verbatim)');
    eq(call.name, 'get_weather', 'name');
    check(typeof call.id === 'string' && call.id !== '', 'function_call id', call.id);
    eq(JSON.parse(call.arguments), { city: 'Paris' }, 'arguments');
    eq(r3.output_text, '', 'no text beside the call');
    const r4 = await client.responses.create({
      model: MODEL, tools, previous_response_id: r3.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21C' }],
    });
    eq(r4.output_text, 'The weather: sunny, 21C', 'the answer from the tool output');
    eq(r4.previous_response_id, r3.id, 'previous_response_id');
    const items = await client.responses.inputItems.list(r4.id);
    eq(items.data.map((i) => [i.type, i.call_id, i.output]), [['function_call_output', 'call_w1', 'sunny, 21C']], 'input_items of the continuation');
    return { call: { call_id: call.call_id, name: call.name, arguments: call.arguments }, text: r4.output_text };
  });

  await step('built-in tool refused', async () => {
    const e = await rejects(client.responses.create({ model: MODEL, tools: [{ type: 'web_search' }], input: 'x' }), BadRequestError, 400, 'a web_search tool');
    eq([e.type, e.code, e.param], ['invalid_request_error', 'unsupported_value', 'tools[0].type'], 'a web_search tool: type, code, param');
    return 'ok';
  });

  await step('function tool stateless (input items)', async () => {
    const r = await client.responses.create({
      model: MODEL, tools, store: false,
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_w1', output: 'rain, 12C' },
      ],
    });
    eq(r.output_text, 'The weather: rain, 12C', 'output_text');
    await rejects(client.responses.retrieve(r.id), NotFoundError, 404, 'retrieve of a store:false response');
    return { text: r.output_text };
  });

  await step('function tool streamed (raw and stream helper)', async () => {
    const raw = await client.responses.create({ model: MODEL, tools, input: 'Weather in Paris?', stream: true });
    const events = [];
    for await (const ev of raw) events.push(ev);
    const { deltas, final } = checkEvents(events, 'raw tool stream');
    eq(JSON.parse(deltas.arguments), { city: 'Paris' }, 'concatenated function_call_arguments.delta');
    const done = events.find((e) => e.type === 'response.function_call_arguments.done');
    check(done, 'a function_call_arguments.done event');
    eq(done.name, 'get_weather', 'function_call_arguments.done name');
    eq(final.output.map((o) => [o.type, o.call_id, o.name, o.arguments]), [['function_call', 'call_w1', 'get_weather', deltas.arguments]], "response.completed's output");

    const s = client.responses.stream({ model: MODEL, tools, input: 'Weather in Paris?' });
    let argSnapshot = '';
    s.on('response.function_call_arguments.delta', (ev) => (argSnapshot = ev.snapshot));
    const fr = await s.finalResponse();
    const [call] = fr.output;
    eq([call?.type, call?.call_id, call?.name], ['function_call', 'call_w1', 'get_weather'], 'finalResponse().output[0]');
    eq(JSON.parse(call.arguments), { city: 'Paris' }, 'finalResponse() arguments');
    eq(argSnapshot, call.arguments, 'the last function_call_arguments.delta snapshot');
    const got = await client.responses.retrieve(fr.id);
    eq(got.output, unparsed(fr.output), 'retrieve(id).output == finalResponse().output');
    return { types: events.map((e) => e.type), arguments: deltas.arguments };
  });
}

summary.ok = failures.length === 0;
console.log(JSON.stringify(summary, null, 1));
if (failures.length) {
  for (const f of failures) console.error(`FAIL ${f}`);
  process.exit(1);
}
