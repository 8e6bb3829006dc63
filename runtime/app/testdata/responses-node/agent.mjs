// The OpenAI Agents SDK (@openai/agents) against the gateway's Responses API (its default model
// API), over a real socket: an agent with one function tool, get_weather, run whole and streamed.
// Run by runtime/app TestResponsesNode against the scripted chat-only upstream of
// responses_test.go (asked with tools it calls get_weather with {"city":"Paris"}; given the
// tool's output it answers "The weather: <output>"); by hand:
//   BASE_URL=http://127.0.0.1:8080/v1 API_KEY=sk-... node agent.mjs
// Prints a JSON summary on stdout; every failed check is written to stderr and the exit status is 1.
import OpenAI from 'openai';
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from '@openai/agents';
import { z } from 'zod';

const { BASE_URL, API_KEY } = process.env;
if (!BASE_URL || !API_KEY) {
  console.error('agent.mjs: set BASE_URL and API_KEY');
  process.exit(2);
}
const MODEL = process.env.MODEL || 'agent-model';

// Tracing would export spans to api.openai.com: off, before anything runs.
setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 0, timeout: 20_000 }));
setOpenAIAPI('responses');

class CheckError extends Error {}
function check(cond, msg, got) {
  if (!cond) throw new CheckError(got === undefined ? msg : `${msg} (got ${JSON.stringify(got)})`);
}
function eq(got, want, what) {
  check(JSON.stringify(got) === JSON.stringify(want), `${what}: want ${JSON.stringify(want)}`, got);
}

let calls = [];
const getWeather = tool({
  name: 'get_weather',
  description: 'The current weather in a city.',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls.push(city);
    return `sunny in ${city}, 21C`;
  },
});
const agent = new Agent({
  name: 'Weather agent',
  instructions: 'Answer questions about the weather with the get_weather tool.',
  model: MODEL,
  tools: [getWeather],
});

// What every run must show: the tool called once with Paris, its output in the final answer, two
// model calls (the tool call, then the answer) with the gateway's response ids.
function checkRun(result, what) {
  eq(calls, ['Paris'], `${what}: get_weather invoked once, with city Paris`);
  check(typeof result.finalOutput === 'string' && result.finalOutput.includes('The weather:'), `${what}: finalOutput contains "The weather:"`, result.finalOutput);
  eq(result.finalOutput, 'The weather: sunny in Paris, 21C', `${what}: finalOutput`);
  check(typeof result.lastResponseId === 'string' && result.lastResponseId.startsWith('resp_'), `${what}: lastResponseId starts with resp_`, result.lastResponseId);
  eq(result.rawResponses.length, 2, `${what}: model responses (the tool call, then the answer)`);
  const types = result.newItems.map((i) => i.type);
  eq(types, ['tool_call_item', 'tool_call_output_item', 'message_output_item'], `${what}: the run's items`);
  const call = result.newItems[0].rawItem;
  eq([call.name, call.callId], ['get_weather', 'call_w1'], `${what}: the tool call item`);
  return { finalOutput: result.finalOutput, lastResponseId: result.lastResponseId, items: types };
}

const summary = { steps: {} };
const failures = [];
async function step(name, fn) {
  calls = [];
  try {
    summary.steps[name] = (await fn()) ?? 'ok';
  } catch (e) {
    const msg = e instanceof CheckError ? e.message : `${e?.constructor?.name}: ${e?.message}${e?.error ? ' ' + JSON.stringify(e.error) : ''}`;
    failures.push(`${name}: ${msg}`);
    summary.steps[name] = { failed: msg };
  }
}

await step('run', async () => checkRun(await run(agent, 'Weather in Paris?'), 'run'));

await step('run streamed', async () => {
  const result = await run(agent, 'Weather in Paris?', { stream: true });
  const events = [];
  let text = '';
  for await (const ev of result) {
    events.push(ev.type === 'run_item_stream_event' ? ev.name : ev.type === 'raw_model_stream_event' ? ev.data.type : ev.type);
    if (ev.type === 'raw_model_stream_event' && ev.data.type === 'output_text_delta') text += ev.data.delta;
  }
  await result.completed;
  check(result.error == null, 'streamed run: no error', String(result.error));
  check(!result.cancelled, 'streamed run: not cancelled');
  const out = checkRun(result, 'run streamed');
  eq(text, result.finalOutput, 'streamed run: output_text_delta events == finalOutput');
  for (const name of ['tool_called', 'tool_output', 'message_output_created']) check(events.includes(name), `streamed run: a ${name} event`, [...new Set(events)]);
  eq(events.filter((e) => e === 'response_done').length, 2, 'streamed run: response_done events (one per model call)');
  return { ...out, events: [...new Set(events)] };
});

summary.ok = failures.length === 0;
console.log(JSON.stringify(summary, null, 1));
if (failures.length) {
  for (const f of failures) console.error(`FAIL ${f}`);
  process.exit(1);
}
