# frozen_string_literal: true

require "rbconfig"

module Glovebox
  # What a Sandbox may hand the guest, decided in this process before
  # anything is sent: which methods of a tools object become guest
  # functions (bound when exposed), which names glovebox refuses, which
  # hook shapes are accepted, and the smallest memory limit. Every
  # transport (the executor over HTTPS, an embedded child) uses these
  # rules, so a Sandbox refuses the same things whichever carries it.
  module Exposure
    module_function

    # A method name the guest can call as name(...): the name part of
    # glovebox.ValidToolName's rule. Setters and operators do not match.
    GUEST_NAME = /\A[a-z_][A-Za-z0-9_]*[?!]?\z/

    # The names glovebox.ValidToolName (tools.go) refuses, copied from its
    # lists so a Sandbox refuses them when it is built instead of at the
    # first eval; TestRubyGemReservedNames (the Go package's tests)
    # fails when the two differ.
    #
    # Ruby's keywords.
    KEYWORDS = %w[alias and begin break case class def defined? do else elsif end ensure false for if in module
                  next nil not or redo rescue retry return self super then true undef unless until when while
                  yield].freeze
    # The methods every guest object responds to (Kernel, Object and
    # BasicObject, public and private, with json loaded), as read from
    # the guest image: a tool of that name would shadow them.
    CORE_METHODS = %w[abort at_exit autoload autoload? binding block_given? caller caller_locations
                      catch class clone define_singleton_method display dup enum_for eql? equal? eval exec exit exit!
                      extend fail fork format freeze frozen? gets global_variables hash initialize initialize_clone
                      initialize_copy initialize_dup inspect instance_eval instance_exec instance_of?
                      instance_variable_defined? instance_variable_get instance_variable_set instance_variables
                      instance_variables_to_inspect is_a? iterator? itself j jj kind_of? lambda load local_variables
                      loop method method_missing methods nil? object_id open p pp print printf private_methods proc
                      protected_methods public_method public_methods public_send putc puts raise rand readline
                      readlines remove_instance_variable require require_relative respond_to? respond_to_missing?
                      select send set_trace_func singleton_class singleton_method singleton_method_added
                      singleton_method_removed singleton_method_undefined singleton_methods sleep spawn sprintf
                      srand syscall system tap test then throw to_enum to_json to_s trace_var trap untrace_var warn
                      yield_self].freeze
    # The top-level object's own methods, which a tool would hide.
    MAIN_METHODS = %w[include public private protected using define_method module_function].freeze
    # Methods Ruby calls implicitly on any object (besides every to_*).
    PROTOCOL_METHODS = %w[each call coerce method_missing respond_to_missing? initialize_copy marshal_dump
                          marshal_load _dump _load encode_with init_with exception dig succ].freeze

    # The smallest memory: limit (bytes) an eval accepts: the linear
    # memory the booted guest occupies, glovebox.Runtime.MemoryFloor for
    # the image this gem's glovebox pins (@ruby/4.0-wasm-wasi 2.10.1 with
    # glovebox's prelude), 369.2 MiB. TestGemMemoryFloor (the Go
    # package's tests) fails when the image's floor moves.
    MEMORY_FLOOR = 387_186_688

    # Why name cannot be a guest function (a String), or nil when it can:
    # glovebox.ValidToolName's rule, with its reasons.
    def name_problem(name)
      n = name.to_s
      return "is not a Ruby method name callable as name(...) (letters, digits and _, starting with a lower-case letter or _, an optional final ? or !)" unless GUEST_NAME.match?(n)
      return "starts with __, which glovebox reserves" if n.start_with?("__")
      return "is a Ruby keyword" if KEYWORDS.include?(n)
      return "names a block's implicit parameter in Ruby" if n == "it" || n.match?(/\A_[1-9]\z/)
      return "would shadow Ruby's core method of that name" if CORE_METHODS.include?(n)
      return "is a method of Ruby's top-level object, which would hide the tool" if MAIN_METHODS.include?(n)
      if n.start_with?("to_") || PROTOCOL_METHODS.include?(n)
        return "is a conversion or protocol method Ruby calls implicitly; a tool of that name would change how every object behaves"
      end

      nil
    end

    # The guest functions obj offers, as {Symbol name => callable}, each
    # bound now (a Method, or a Hash's Proc), so redefining a method later
    # cannot change or widen what the guest reaches.
    #
    # Only code of obj's own is exposable: the public methods its
    # singleton class, its class and their ancestors define, up to the
    # first class a library defines (Ruby's Object, Struct, Hash, Module,
    # Class, ...; an installed gem's base class, such as a framework's
    # model or an HTTP client's), skipping the modules libraries define
    # (Kernel, Enumerable, Comparable, Forwardable; a gem's mixins and
    # their class methods). Library code is what Ruby defines (in C, in
    # its <internal:...> files, or under its library directories) and
    # what RubyGems or Bundler installed (under a Gem.path directory):
    # none of it was written as a tool, and a gem's mixin can reach the
    # network, the database or the process. A Module or Class a library
    # defines exposes nothing (tools: Dir or Marshal offers no glob or
    # restore). So an instance exposes its class's
    # methods; a Module its functions (an `extend self` module's instance
    # methods, or module_function's); a Class its class methods (def
    # self.x), never new, allocate, class_eval or any other method of
    # Module, Class, Object or Kernel; a Struct its own methods and its
    # members' readers, never their setters. Methods written in C (no
    # source file) are left out, but for a Struct's or Data's member
    # readers; so are overrides of the methods of the class the search
    # stopped at (to_s, inspect, ==; a Class's or Module's new, name,
    # include, ...) and the methods Ruby calls by itself (initialize,
    # method_missing, respond_to_missing?, ...). A method_missing is never
    # reached: only real methods are bound.
    #
    # A Hash exposes its values by key: each a Proc, a Method, or an
    # object with a public call method.
    #
    # ceiling: an object defining glovebox_tool_methods (or Enclave's
    # enclave_tool_methods), public or private, never exposes anything
    # outside the names it returns. only: keeps the named functions,
    # except: drops them (Arrays of Symbol or String; not both).
    #
    # Raises ConfigError naming the problem: a name in only:/except:
    # that is not an exposable function (with the list of those that
    # are), a name glovebox refuses (name_problem), a Hash value that is
    # not callable, or nothing to expose.
    def functions(obj, only: nil, except: nil)
      raise ConfigError, "pass only: or except:, not both" if only && except

      fns = case obj
            when HostTools then obj.functions # run in the child (host_tools.rb)
            when Hash then hash_functions(obj)
            else object_functions(obj)
            end
      what = describe(obj)
      [[only, "only:"], [except, "except:"]].each do |list, opt|
        next unless list

        bad = names_of(list, opt) - fns.keys
        next if bad.empty?

        raise ConfigError, "#{opt} #{bad.join(", ")} #{bad.size == 1 ? "is not an exposable function" : "are not exposable functions"} " \
                           "of #{what} (exposable: #{list_or_none(fns.keys)})"
      end
      fns = fns.slice(*names_of(only, "only:")) if only
      fns = fns.except(*names_of(except, "except:")) if except
      bad = fns.keys.filter_map { |n| (why = name_problem(n)) && "#{n} #{why}" }
      unless bad.empty?
        raise ConfigError, "#{what}: #{bad.join("; ")}. Rename #{bad.size == 1 ? "it" : "them"}, make #{bad.size == 1 ? "it" : "them"} " \
                           "private, or leave #{bad.size == 1 ? "it" : "them"} out with except:"
      end
      if fns.empty? && !only
        raise ConfigError, "#{what} exposes no functions (a public method its own code defines, not Ruby's " \
                           "or an installed gem's; a Module's functions need extend self or module_function; " \
                           "hand a library's method over by name in a Hash: { name: obj.method(:name) })"
      end
      fns
    end

    # The parameters of a callable as glovebox.Param's wire form (Hashes
    # with String keys "name", "required", "variadic", "keywords",
    # "schema"), read from its Ruby signature: required and optional
    # positional parameters in order, a rest parameter as variadic, and
    # the keyword parameters as one last "keywords" parameter whose
    # schema names them (required ones listed), so code mode's example
    # call passes them as keywords.
    def params(callable)
      list = callable.parameters
      lenient = callable.is_a?(Proc) && !callable.lambda?
      out = []
      kw = {}
      kreq = []
      krest = false
      list.each_with_index do |(type, name), i|
        case type
        when :req, :opt
          out << { "name" => (name || "arg#{i + 1}").to_s, "required" => type == :req && !lenient }
        when :rest
          out << { "name" => (name && name != :* ? name : "args").to_s, "variadic" => true }
        when :keyreq, :key
          kw[name.to_s] = {}
          kreq << name.to_s if type == :keyreq
        when :keyrest then krest = true
        end
      end
      unless kw.empty? && !krest
        schema = { "type" => "object" }
        schema["properties"] = kw unless kw.empty?
        schema["required"] = kreq unless kreq.empty?
        schema["additionalProperties"] = false unless krest
        out << { "name" => "keywords", "keywords" => true, "required" => !kreq.empty?, "schema" => schema }
      end
      out
    end

    # The shapes each hook may take: the documented one first (Integer
    # count of positional arguments), then Enclave's.
    HOOK_SHAPES = {
      before_tool_call: { 3 => "(name, args, kwargs)", 2 => "Enclave's (name, args)" },
      after_tool_call: { 4 => "(name, args, kwargs, result)", 3 => "Enclave's (name, args, result)" },
      approver: { 3 => "(name, args, kwargs)", 2 => "(name, args)" },
      error_sanitizer: { 2 => "(name, exception)" },
    }.freeze

    # fn (a hook the Sandbox was given) as a callable taking the
    # documented arguments, adapted to the shape fn takes (HOOK_SHAPES:
    # Enclave's before_tool_call ->(name, args) gets name and args, its
    # after_tool_call ->(name, args, result) the result); nil for nil. A
    # Proc (not a lambda) with as many parameters as Enclave's shape is
    # taken as that shape; one with fewer than the documented shape gets
    # the documented arguments (it ignores the rest); one with more is
    # refused.
    # Raises ConfigError naming the hook and the shapes accepted for
    # something not callable or a callable that takes neither shape
    # (required keyword parameters included).
    def hook(kind, fn)
      return nil if fn.nil?

      shapes = HOOK_SHAPES.fetch(kind)
      full = shapes.keys.first
      call = fn.respond_to?(:call) && (fn.is_a?(Proc) || fn.is_a?(Method) ? fn : fn.method(:call))
      raise ConfigError, "#{kind}: #{fn.class} does not respond to call; pass a lambda taking #{shape_list(shapes)}" unless call

      n = arity_for(call, shapes.keys)
      unless n
        raise ConfigError, "#{kind}: a callable taking #{signature(call)} cannot be called as #{shape_list(shapes)}; " \
                           "give it one of those shapes"
      end
      return fn if n == full

      case kind
      when :before_tool_call, :approver then ->(name, args, _kwargs) { call.call(name, args) }
      when :after_tool_call then ->(name, args, _kwargs, result) { call.call(name, args, result) }
      end
    end

    # Names a setting lists (require_approval, needs_approval:, suspend:)
    # as Symbols, each an exposed function; raises ConfigError naming
    # the setting, the names that are not exposed and those that are.
    def exposed_names(setting, names, exposed)
      list = names_of(names, setting)
      bad = list - exposed
      return list if bad.empty?

      raise ConfigError, "#{setting}: #{bad.join(", ")} #{bad.size == 1 ? "is not an exposed function" : "are not exposed functions"} " \
                         "(exposed: #{list_or_none(exposed)}#{exposed.empty? ? "; expose the tools first" : ""})"
    end

    # ---- the search for an object's own methods ----

    SINGLETON_CLASS = Kernel.instance_method(:singleton_class)
    MODULE_NAME = Module.instance_method(:name)
    ANCESTORS = Module.instance_method(:ancestors)
    CLASS_OF = Kernel.instance_method(:class)
    RUBY_DIRS = RbConfig::CONFIG.values_at("rubylibdir", "rubyarchdir", "sitelibdir", "sitearchdir", "vendorlibdir",
                                           "vendorarchdir").compact.reject(&:empty?).uniq.map { File.join(_1, "") }.freeze
    # Methods Ruby calls on an object itself (construction, copies, missing
    # methods, definitions): never tools, even when public.
    RUBY_HOOKS = %i[initialize initialize_copy initialize_clone initialize_dup method_missing respond_to_missing?
                    singleton_method_added singleton_method_removed singleton_method_undefined method_added
                    method_removed method_undefined included extended prepended inherited const_missing].freeze
    private_constant :RUBY_HOOKS, :SINGLETON_CLASS, :MODULE_NAME, :ANCESTORS, :CLASS_OF, :RUBY_DIRS

    def object_functions(obj)
      sc = lookup_class(obj)
      own, stop = own_modules(obj, sc)
      core = stop.public_instance_methods(true) | RUBY_HOOKS |
             (stop.private_instance_methods(true) - Kernel.private_instance_methods(false))
      ceiling = %i[glovebox_tool_methods enclave_tool_methods].find do |m|
        sc.method_defined?(m) || sc.private_method_defined?(m)
      end
      allowed = ceiling && Array(sc.instance_method(ceiling).bind_call(obj)).map(&:to_sym)
      names = own.flat_map { _1.public_instance_methods(false) }.uniq
      names -= %i[glovebox_tool_methods enclave_tool_methods]
      names &= allowed if allowed
      names.sort.each_with_object({}) do |n, fns|
        next unless GUEST_NAME.match?(n) && sc.public_method_defined?(n) && !core.include?(n)

        um = sc.instance_method(n)
        next unless own.include?(um.owner)

        loc = um.source_location
        next if loc.nil? ? !member_reader?(um.owner, n) : loc[0].start_with?("<internal:")

        fns[n] = um.bind(obj)
      end
    end

    # Where obj's methods are looked up: its singleton class, or its class
    # for an object that cannot have one (an Integer, a frozen literal).
    def lookup_class(obj)
      SINGLETON_CLASS.bind_call(obj)
    rescue TypeError
      CLASS_OF.bind_call(obj)
    end

    # The modules of sc's ancestry that are obj's own code, and the first
    # class where the search stopped (Ruby's).
    def own_modules(obj, sc)
      attached = {}
      if Class === obj
        ANCESTORS.bind_call(obj).each { |k| attached[SINGLETON_CLASS.bind_call(k)] = k if Class === k }
      end
      own = []
      return [own, sc] if Module === obj && library_defined?(obj)

      ANCESTORS.bind_call(sc).each do |m|
        if m.equal?(sc) && sc.singleton_class?
          own << m
        elsif m.singleton_class?
          k = attached[m]
          return [own, m] if k.nil? || library_defined?(k)

          own << m
        elsif Class === m
          return [own, m] if library_defined?(m)

          own << m
        elsif !library_defined?(m)
          own << m
        end
      end
      [own, BasicObject]
    end

    # True for a class or module a library defines (where its constant
    # was first set): Ruby in C (no source file, or line 0) or in an
    # <internal:...> file, or a file under Ruby's library directories (RUBY_DIRS) or an
    # installed gem's (library_dirs). Anonymous ones are the app's.
    def library_defined?(mod)
      name = MODULE_NAME.bind_call(mod)
      return false if name.nil?

      loc = begin
        Object.const_source_location(name)
      rescue NameError
        nil
      end
      return false if loc.nil?
      # Line 0 ("<main>" or "ruby"): set by the interpreter as it boots.
      return true if loc.empty? || loc[1].to_i.zero? || loc[0].start_with?("<internal:")

      path = File.expand_path(loc[0])
      return false if path.start_with?(EXAMPLES_DIR)

      library_dirs.any? { path.start_with?(_1) }
    end

    # This gem's own examples/ (ending in a slash): scripts a user runs
    # where they are installed (ruby "$(gem contents glovebox | grep
    # first.rb)"), whose classes are that user's tools, though they sit
    # under a Gem.path directory.
    EXAMPLES_DIR = File.join(File.expand_path("../../examples", __dir__), "")

    # Ruby's library directories and RubyGems' (Gem.path: where gems are
    # installed, Bundler's bundle path and its git checkouts included),
    # each ending in a slash; read now, since Bundler may set the paths
    # after this file loads. A gem used from a path of the app's own
    # (Bundler's path:) is the app's code.
    def library_dirs
      gem_dirs = defined?(::Gem) && ::Gem.respond_to?(:path) ? ::Gem.path : []
      RUBY_DIRS + gem_dirs.map { File.join(File.expand_path(_1), "") }
    end

    def member_reader?(owner, name)
      return false unless Class === owner

      data = defined?(::Data) && owner < ::Data
      (owner < ::Struct || data) && owner.members.include?(name)
    end

    def hash_functions(hash)
      hash.each_with_object({}) do |(k, v), fns|
        unless k.is_a?(Symbol) || k.is_a?(String)
          raise ConfigError, "tools: a Hash's keys are the function names (Symbol or String), not #{k.class}: #{k.inspect}"
        end

        fns[k.to_sym] = case v
                        when Proc, Method then v
                        else
                          sc = lookup_class(v)
                          unless sc.public_method_defined?(:call)
                            raise ConfigError, "tools: #{k} is a #{CLASS_OF.bind_call(v)}, which is not callable " \
                                               "(give a lambda, a Method or an object with a public call method)"
                          end
                          sc.instance_method(:call).bind(v)
                        end
      end
    end

    # What obj is, for messages: "the tools Hash", "module SupportTools",
    # "class Reports", "SupportTools instance".
    def describe(obj)
      case obj
      when Hash then "the tools Hash"
      when HttpTool then "Glovebox::HttpTool"
      when HostTools then "the MCP servers (mcp:)"
      when Module then "#{obj.class.name.downcase} #{MODULE_NAME.bind_call(obj) || obj.inspect}"
      else "#{CLASS_OF.bind_call(obj)} instance"
      end
    end

    def names_of(list, setting)
      Array(list).flatten.map do |n|
        raise ConfigError, "#{setting} names functions by Symbol or String, not #{n.class}: #{n.inspect}" unless n.is_a?(Symbol) || n.is_a?(String)

        n.to_sym
      end
    end

    def list_or_none(names) = names.empty? ? "none" : names.sort.join(", ")

    def arity_for(call, counts)
      ps = call.parameters
      return nil if ps.any? { _1[0] == :keyreq }

      pos = ps.count { %i[req opt].include?(_1[0]) }
      rest = ps.any? { _1[0] == :rest }
      if call.is_a?(Proc) && !call.lambda?
        # A block takes what it is given, but one naming more parameters
        # than any shape has expects arguments that never come.
        return nil if !rest && pos > counts.first
        return counts.last if counts.size > 1 && !rest && pos == counts.last

        return counts.first
      end
      req = ps.count { _1[0] == :req }
      counts.find { |n| n >= req && (rest || n <= pos) }
    end

    def signature(call)
      ps = call.parameters.reject { _1[0] == :block }
      return "no arguments" if ps.empty?

      "(" + ps.map do |t, n|
        { req: n.to_s, opt: "#{n} = ...", rest: "*#{n}", keyreq: "#{n}:", key: "#{n}: ...", keyrest: "**#{n}" }.fetch(t, n.to_s)
      end.join(", ") + ")"
    end

    def shape_list(shapes) = shapes.values.join(" or ")

    private_class_method :object_functions, :lookup_class, :own_modules, :library_defined?, :library_dirs, :member_reader?, :hash_functions,
                         :names_of, :list_or_none, :arity_for, :signature, :shape_list
  end
end
