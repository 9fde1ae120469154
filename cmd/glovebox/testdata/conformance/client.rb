# The MCP client the official conformance suite drives in client mode:
# `glovebox eval --mcp-url` binding the scenario's server, with a program
# per scenario calling the tools it expects called. The suite appends the
# server's URL to the command and names the scenario in
# $MCP_CONFORMANCE_SCENARIO (its data, if any, in $MCP_CONFORMANCE_CONTEXT;
# the revision in $MCP_CONFORMANCE_PROTOCOL_VERSION). $GLOVEBOX is the
# glovebox binary.
require "json"

url = ARGV.fetch(-1)
scenario = ENV.fetch("MCP_CONFORMANCE_SCENARIO")
context = JSON.parse(ENV["MCP_CONFORMANCE_CONTEXT"] || "{}")
# --json prints the result with the transcript of every tool call, and
# --log-mcp the connection's log: the test looks for tokens in both.
args = [ENV.fetch("GLOVEBOX"), "eval", "--mcp-url", "s=#{url}", "--timeout", "120s", "--stdin", "/dev/null", "--json", "--log-mcp"]
if (v = ENV["MCP_CONFORMANCE_PROTOCOL_VERSION"]) && !v.empty?
  args += ["--mcp-protocol", v]
end

# A tool call that may be refused: the refusal is printed, the program
# goes on.
try = ->(call) { "begin; #{call}; rescue Glovebox::ToolError => e; puts \"refused: \#{e.class}: \#{e.message}\"; end" }

code =
  case scenario
  when "tools_call" then "add_numbers(a: 5, b: 3)"
  when "elicitation-sep1034-client-defaults"
    args += ["--mcp-elicit", "accept"]
    "test_client_elicitation_defaults"
  when "sse-retry" then "test_reconnection"
  when "sep-2322-client-request-state"
    args += ["--mcp-elicit", "accept"]
    %w[test_mrtr_echo_state test_mrtr_no_state test_mrtr_unrelated test_mrtr_no_result_type].map(&try).join("\n")
  when "http-invalid-tool-headers" # the valid tool stays callable
    try.("valid_tool(region: \"us-west1\")")
  when "http-custom-headers"
    (context["toolCalls"] || []).map { |c| try.("#{c["name"].downcase.gsub(/[^a-z0-9_]+/, "_")}(**#{c["arguments"].inspect}.transform_keys(&:to_sym))") }.join("\n")
  when %r{\Aauth/}
    oauth = "s,client_metadata=https://conformance-test.local/client-metadata.json"
    oauth += ",client_id=#{context["client_id"]}" if context["client_id"]
    if context["client_secret"]
      ENV["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
      oauth += ",client_secret_env=CONFORMANCE_CLIENT_SECRET"
    end
    # The suite's authorization server approves at once: fetching the URL
    # and following its redirect is the browser.
    args += ["--mcp-oauth", oauth, "--mcp-oauth-open", "curl -sfL -o /dev/null"]
    "test_tool"
  else "nil" # connecting and listing the tools is the scenario
  end
exec(*args, "-e", code)
