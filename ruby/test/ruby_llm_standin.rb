# frozen_string_literal: true

require "json"

# A stand-in for the ruby_llm gem (and its MCP client), for the gem's
# tests: ruby_llm cannot be installed here (no network but Go modules,
# Debian packages and npm), so this implements the parts of RubyLLM's
# documented tool interface that glovebox's CodeMode meets, nothing
# more:
#
# - RubyLLM::Tool: class-level description(text), param/parameter(name,
#   type:, desc:/description:, required:) kept per class; instances answer
#   name (the class name's leaf in snake case, "_tool" dropped),
#   description, parameters, params_schema (the declared parameters, or
#   execute's keywords when none are declared: RubyLLM's signature
#   inference), call(args) (keys symbolized, then execute(**args)) and
#   execute.
# - RubyLLM.chat / RubyLLM::Chat: with_tool(s) (a class is instantiated
#   with new), tools, ask. The model is scripted: each ask takes the next
#   turn of Chat.script, a list of tool calls ({name:, arguments:}), calls
#   the tools by name as RubyLLM does (tool.call(arguments)) and answers
#   with their results.
# - RubyLLM.mcp(url:) / RubyLLM::MCP: a server with a name, instructions
#   and tools (name, description, input_schema, call(args) answering an
#   MCP CallToolResult: content, structuredContent, isError). Servers are
#   registered by URL (RubyLLM::MCP.register); an unknown URL is a server
#   that cannot be reached (listing its tools raises).
module RubyLLM
  class Parameter
    attr_reader :name, :type, :description, :required

    def initialize(name, type: "string", desc: nil, description: nil, required: true)
      @name = name
      @type = type
      @description = description || desc
      @required = required
    end
  end

  class Tool
    class << self
      def description(text = nil)
        return @description if text.nil?

        @description = text
      end

      def param(name, **options)
        parameters[name] = Parameter.new(name, **options)
      end
      alias parameter param

      def parameters = @parameters ||= {}
    end

    def name
      leaf = self.class.name.to_s.split("::").last.to_s
      leaf.gsub(/([A-Z]+)([A-Z][a-z])/, '\1_\2').gsub(/([a-z\d])([A-Z])/, '\1_\2').downcase.delete_suffix("_tool")
    end

    def description = self.class.description
    def parameters = self.class.parameters

    def params_schema
      props = {}
      required = []
      if parameters.empty?
        method(:execute).parameters.each do |type, pname|
          next unless %i[key keyreq].include?(type)

          props[pname.to_s] = { "type" => "string" }
          required << pname.to_s if type == :keyreq
        end
      else
        parameters.each_value do |p|
          props[p.name.to_s] = { "type" => p.type.to_s, "description" => p.description.to_s }
          required << p.name.to_s if p.required
        end
      end
      { "type" => "object", "properties" => props, "required" => required }
    end

    def call(args)
      execute(**args.to_h.transform_keys(&:to_sym))
    end

    def execute(...) = raise(NotImplementedError, "Subclasses must implement #execute")
  end

  Message = Struct.new(:role, :content, keyword_init: true)

  class Chat
    class << self
      # The scripted model: turns, each a list of tool calls.
      def script = @script ||= []
    end

    attr_reader :messages

    def initialize(model: nil)
      @model = model
      @tools = {}
      @messages = []
    end

    def with_tool(tool)
      instance = tool.is_a?(Class) ? tool.new : tool
      @tools[instance.name.to_sym] = instance
      self
    end

    def with_tools(*tools)
      tools.flatten.each { with_tool(_1) }
      self
    end

    def tools = @tools

    def ask(prompt)
      @messages << Message.new(role: :user, content: prompt)
      turn = Chat.script.shift || []
      results = turn.map do |call|
        tool = @tools.fetch(call[:name].to_sym) { raise "the model called #{call[:name]}, which the chat does not have" }
        result = tool.call(call[:arguments])
        @messages << Message.new(role: :tool, content: result)
        result
      end
      Message.new(role: :assistant, content: results.last).tap { @messages << _1 }
    end
  end

  def self.chat(**opts) = Chat.new(**opts)

  module MCP
    class Tool
      attr_reader :name, :description, :input_schema

      def initialize(name:, description:, input_schema:, handler:)
        @name = name
        @description = description
        @input_schema = input_schema
        @handler = handler
      end

      def call(args)
        out = @handler.call(args)
        text = out.is_a?(String) ? out : JSON.generate(out)
        { "content" => [{ "type" => "text", "text" => text }], "structuredContent" => out.is_a?(String) ? nil : out, "isError" => false }
      rescue StandardError => e
        { "content" => [{ "type" => "text", "text" => e.message }], "isError" => true }
      end
    end

    class Server
      attr_reader :name, :url, :instructions

      def initialize(url:, name: nil, instructions: nil, tools: nil)
        @url = url
        @name = name
        @instructions = instructions
        @tools = tools
      end

      def tools
        raise IOError, "connection refused: #{@url}" if @tools.nil?

        @tools
      end
    end

    # Registers a server at url: tools {name => {description:,
    # input_schema:, handler: ->(args) { ... }}}.
    def self.register(url, name:, tools:, instructions: nil)
      servers[url] = { name: name, instructions: instructions,
                       tools: tools.map { |n, t| Tool.new(name: n.to_s, description: t[:description], input_schema: t[:input_schema], handler: t[:handler]) } }
    end

    def self.servers = @servers ||= {}
  end

  def self.mcp(url:)
    s = MCP.servers[url]
    MCP::Server.new(url: url, name: s&.dig(:name), instructions: s&.dig(:instructions), tools: s&.dig(:tools))
  end
end
