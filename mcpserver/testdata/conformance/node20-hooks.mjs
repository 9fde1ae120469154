// Loader hook for running @modelcontextprotocol/conformance on Node 20: its
// bundle imports fs.globSync (Node 22+) only to aggregate results from disk,
// which the server mode used here never does. The hook drops that import and
// binds the name to a function that throws, so a use would fail loudly.
export async function load(url, context, next) {
  const r = await next(url, context);
  if (url.endsWith("/conformance/dist/index.js")) {
    let src = String(r.source).replace(/^#!.*\n/, "").replace("globSync as o,", "");
    src = 'import {globSync as o} from "data:text/javascript,export function globSync(){throw new Error(\'fs.globSync needs Node 22\')}";' + src;
    return { ...r, source: src };
  }
  return r;
}
