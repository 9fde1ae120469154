# frozen_string_literal: true

module Glovebox
  # Code mode: one tool a model calls with a Ruby program, whose
  # description and JSON result are made by glovebox's own code mode (in
  # the embedded child, or on the executor: POST /v1/codemode,
  # EXECUTOR.md "Code mode"), not re-implemented here. Any Ruby LLM library can call it through the
  # shape it exposes: #name, #description, #parameters (a JSON Schema
  # Hash) and #call(code:) (a JSON String for the model).
  #
  #   tool = Glovebox::CodeMode.new(sandbox, instructions: "Answer for customer 42.")
  #   tool.description           # Markdown for the model
  #   tool.call(code: "orders.size") #=> '{"status":"ok","value":3,...}'
  class CodeMode
    attr_reader :name, :description, :parameters, :last_result

    # sandbox: a Sandbox (or a Session, to keep state between calls).
    # name: the tool's name (default "run_ruby"); instructions: added to
    # the description; max_output: bytes of JSON per call (default 32 KiB);
    # docs: {tool_name => {description:, params: [{name:, description:,
    # schema:, required:}], returns:, example:}} describing the exposed
    # functions for the model; a function without params: is described
    # by its Ruby signature (required and optional positional
    # parameters, a rest parameter, keyword parameters as keywords), so
    # the example call for def notes(note:) is notes(note: ...). Raises
    # APIError (bad_request for a bad name or doc; evals_disabled).
    def initialize(sandbox, name: nil, instructions: nil, max_output: nil, docs: {})
      @target = sandbox
      @sb = sandbox.is_a?(Session) ? sandbox.instance_variable_get(:@sb) : sandbox
      @session = sandbox.is_a?(Session)
      gated = @sb.instance_variable_get(:@gated)
      tools = @sb.exposed_functions.map do |n|
        d = docs[n] || docs[n.to_s] || {}
        { "name" => n.to_s, "description" => d[:description].to_s, "returns" => d[:returns].to_s,
          "example" => d[:example].to_s, "needs_approval" => gated.include?(n),
          "params" => d[:params] ? Array(d[:params]).map { |p| p.transform_keys(&:to_s) } : @sb.tool_params(n) }
      end
      lim = @sb.limits
      @base = { "name" => name, "instructions" => instructions, "max_output" => max_output, "session" => @session,
                "tools" => tools, "limits" => @sb.wire_limits, "tool_calls" => lim[:tool_calls],
                "tool_time_ms" => lim[:tool_time] && (lim[:tool_time] * 1000).round }.compact
      info = @sb.code_mode_request(@base)
      @name = info["name"]
      @description = info["description"]
      @parameters = JSON.parse(JSON.generate(info["input_schema"]))
    end

    # Runs the model's program and returns the JSON String the model
    # reads (status, value, stdout, error, tool_calls, ...), as glovebox's
    # code mode makes it. #last_result keeps the Result.
    def call(code:)
      @last_result = @target.eval(code)
      out = @sb.code_mode_request(@base.merge("result" => @last_result.raw.merge(
        "tool_calls" => @last_result.tool_calls.map { |c| transcript_entry(c) }
      )))
      JSON.generate(out["output"])
    end

    # A Hash with the fields many LLM libraries take for a function tool.
    def to_h = { name: @name, description: @description, parameters: @parameters }

    private

    def transcript_entry(c)
      { "name" => c.name, "args" => Value.to_wire(c.args, 0), "kwargs" => Value.to_wire(c.kwargs, 0),
        "result" => safe(c.result), "error" => c.error, "outcome" => c.outcome, "approval" => c.approval,
        "duration_ms" => c.duration.to_f * 1000, "elided" => c.elided || nil }.compact
    end

    def safe(v)
      Value.to_wire(v, 0)
    rescue ValueError
      nil
    end
  end
end
