// A client on the TypeScript MCP SDK 1.x (its experimental tasks API, MCP
// 2025-11-25) against `glovebox mcp --http`: it starts a run_ruby task
// that waits for the file $GATE, drops its connection, reconnects to the
// same session, creates $GATE, polls the task to its end and fetches the
// result; then it cancels a task that loops forever and calls again.
// Each finding is printed as one JSON line for the Go test to check.
// Environment: SDK (the SDK's dist/esm folder), URL, GATE.
import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const sdk = (p) => import(pathToFileURL(`${process.env.SDK}/${p}`).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { CallToolResultSchema } = await sdk('types.js');
const url = new URL(process.env.URL);
const say = (k, v) => console.log(JSON.stringify({ [k]: v }));

const first = new Client({ name: 'ts-tasks', version: '1' });
const t1 = new StreamableHTTPClientTransport(url);
await first.connect(t1);
say('protocolVersion', t1.protocolVersion);
say('capability', first.getServerCapabilities().tasks ?? null);
const { tools } = await first.listTools();
say('execution', tools.find((t) => t.name === 'run_ruby').execution ?? null);

const code = 'sleep 0.05 until File.exist?("/data/go")\n6 * 7';
const stream = first.experimental.tasks.callToolStream({ name: 'run_ruby', arguments: { code } }, CallToolResultSchema, { task: { ttl: 60000 } });
const created = (await stream.next()).value;
say('created', created.type === 'taskCreated' ? created.task.status : created);
const taskId = created.task.taskId;
const session = t1.sessionId;
await t1.close(); // the connection drops; the session and the task stay

const second = new Client({ name: 'ts-tasks', version: '1' });
const t2 = new StreamableHTTPClientTransport(url, { sessionId: session });
await second.connect(t2); // the same session: no initialize
t2.setProtocolVersion('2025-11-25');
const tasks = second.experimental.tasks;
say('afterReconnect', (await tasks.getTask(taskId)).status);
writeFileSync(process.env.GATE, '');
let task;
for (;;) {
  task = await tasks.getTask(taskId);
  if (task.status !== 'working') break;
  await new Promise((r) => setTimeout(r, task.pollInterval ?? 100));
}
say('ended', task.status);
const result = await tasks.getTaskResult(taskId, CallToolResultSchema);
say('value', result.structuredContent.value);
say('listed', (await tasks.listTasks()).tasks.map((t) => t.taskId).includes(taskId));

const loop = tasks.callToolStream({ name: 'run_ruby', arguments: { code: 'loop {}' } }, CallToolResultSchema, { task: {} });
const looping = (await loop.next()).value.task.taskId;
await loop.return();
say('cancel', (await tasks.cancelTask(looping)).status);
say('afterCancel', (await tasks.getTask(looping)).status);
try {
  await tasks.cancelTask(looping);
  say('cancelAgain', 'accepted');
} catch (e) {
  say('cancelAgain', e.code);
}
// With one sandbox, the next call runs only if the loop was stopped.
const next = await second.callTool({ name: 'run_ruby', arguments: { code: '1 + 1' } });
say('next', next.structuredContent.value);
await t2.terminateSession();
await t2.close();
