// A client on the TypeScript SDK (@modelcontextprotocol/client 2.x) at MCP
// 2026-07-28 that sends each HTTP request to the next of the URLs given
// (argv[2], argv[3], ...), as a load balancer in front of several
// `glovebox mcp --http` processes would. It prints one JSON line per step.
// The program that calls the approval-gated tool follows "--approve-code".
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const args = process.argv.slice(2);
const cut = args.indexOf('--approve-code');
const urls = args.slice(0, cut);
const approveCode = args[cut + 1];
let n = 0;
const hits = urls.map(() => 0);
const alternate = (url, init) => {
  const i = n++ % urls.length;
  hits[i]++;
  return fetch(urls[i], init);
};

let answer = 'accept';
let asked = 0;
const client = new Client({ name: 'glovebox-test', version: '1.0.0' }, {
  capabilities: { elicitation: {} },
  versionNegotiation: { mode: { pin: '2026-07-28' } },
});
client.setRequestHandler('elicitation/create', async () => {
  asked++;
  if (answer === 'accept') return { action: 'accept', content: { approve: true } };
  return { action: answer };
});
await client.connect(new StreamableHTTPClientTransport(new URL(urls[0]), { fetch: alternate }));

const out = (step, r) => console.log(JSON.stringify({ step, result: r, asked }));
const call = (name, a) => client.callTool({ name, arguments: a });

out('tools', (await client.listTools()).tools.map(t => t.name));
out('run', await call('run_ruby', { code: '6 * 7' }));
for (const a of ['accept', 'decline', 'cancel']) {
  answer = a;
  asked = 0;
  out('approve-' + a, await call('run_ruby', { code: approveCode }));
}
const first = await call('ruby_session', { code: 'x = 41' });
out('session-1', first);
const second = await call('ruby_session', { code: 'x + 1', session: first.structuredContent.session });
out('session-2', second);
out('hits', hits);
await client.close();

// A client that cannot be asked: the call is denied with the reason.
const bare = new Client({ name: 'glovebox-test-bare', version: '1.0.0' }, {
  versionNegotiation: { mode: { pin: '2026-07-28' } },
});
await bare.connect(new StreamableHTTPClientTransport(new URL(urls[0]), { fetch: alternate }));
asked = 0;
out('approve-no-capability', await bare.callTool({ name: 'run_ruby', arguments: { code: approveCode } }));
await bare.close();
