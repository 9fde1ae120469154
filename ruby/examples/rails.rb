# frozen_string_literal: true

# A Rails-shaped app on embedded glovebox: an initializer, models (plain
# Ruby objects standing in for ActiveRecord), a tools class where the
# authorization lives, a controller action per request on Puma-like
# threads, and a plan change that waits for a person. Nothing to start
# beside the app: the gem runs glovebox itself.
#
#   ruby examples/rails.rb
require "glovebox"
require "json"
require "logger"

# config/initializers/glovebox.rb
Glovebox.configure do |c|
  c.timeout = 5                                    # seconds per eval, app-wide
  c.tool_calls = 20
  c.logger = Logger.new($stderr, level: :warn)     # Rails.logger in an app
  # Seals paused evals; every process that continues one needs it (from
  # your credentials store in an app; a fixed key here).
  c.state_key = ENV.fetch("GLOVEBOX_STATE_KEY", "4a" * 32)
end

# app/models: the shapes ActiveRecord would give.
User = Struct.new(:id, :name, :plan, :refunds_today, keyword_init: true)
Order = Struct.new(:id, :user_id, :status, :total_cents, keyword_init: true) do
  def self.where(user_id:) = Order::STORE.select { _1.user_id == user_id }
  def as_json = { "id" => id, "status" => status, "total" => total_cents / 100.0 }
end
Order::STORE = [
  Order.new(id: 1, user_id: 7, status: "shipped", total_cents: 3050),
  Order.new(id: 2, user_id: 7, status: "delivered", total_cents: 1200),
  Order.new(id: 3, user_id: 9, status: "shipped", total_cents: 99_900), # another customer's
].freeze

# app/tools/support_tools.rb: every query scoped to the current user;
# plain data out (as_json), never a model.
class SupportTools
  class NotFound < Glovebox::ToolError; end # Glovebox::NotFound in the guest

  def initialize(user) = @user = user

  def orders(status: nil)
    scope = Order.where(user_id: @user.id)
    scope = scope.select { _1.status == status } if status
    scope.map(&:as_json)
  end

  def refund(order_id)
    order = Order.where(user_id: @user.id).find { _1.id == order_id } or raise NotFound, "no order #{order_id}"
    "refund queued for order #{order.id}"
  end

  def change_plan(plan)
    @user.plan = plan
    "plan is #{plan}"
  end

  def audit_log = [] # public for the app, never for the sandbox
  private def glovebox_tool_methods = %i[orders refund change_plan]
end

# app/controllers/assistant_controller.rb: one Sandbox per request.
class AssistantController
  def initialize(user) = @user = user

  def answer(code)
    sandbox = Glovebox::Sandbox.new(tools: SupportTools.new(@user), suspend: [:change_plan])
    sandbox.require_approval(:refund) { |_name, _args, _kw| @user.refunds_today < 3 }
    tool = Glovebox::CodeMode.new(sandbox, instructions: "You help #{@user.name}.")
    [JSON.parse(tool.call(code: code)), tool.last_result]
  end
end

ada = User.new(id: 7, name: "Ada", plan: "free", refunds_today: 0)
bob = User.new(id: 9, name: "Bob", plan: "free", refunds_today: 3)

# Two requests at once, as Puma's threads serve them.
requests = [
  [ada, 'orders(status: "shipped").sum { _1["total"] }'],
  [bob, "begin; refund(3); rescue Glovebox::ToolDenied => e; e.class.name; end"],
]
requests.map { |user, code| Thread.new { [user.name, AssistantController.new(user).answer(code).first] } }.each do |t|
  name, out = t.value
  puts "#{name}: #{out["status"]} #{out["value"].inspect}"
end

# Another customer's order is not found: the scope is the tools object.
out, = AssistantController.new(ada).answer("begin; refund(3); rescue Glovebox::NotFound => e; e.message; end")
puts "Ada refunds order 3: #{out["value"]}"

# A plan change waits for a person: the eval pauses, its key is stored
# (a column of a PlanRequest in an app), and a later request continues it.
out, result = AssistantController.new(ada).answer('puts "asking"; change_plan("pro")')
puts "paused: #{out["status"]} at #{result.pending.name}(#{result.pending.args.join(", ")}), plan still #{ada.plan}"
sandbox = Glovebox::Sandbox.new(tools: SupportTools.new(ada), suspend: [:change_plan])
done = sandbox.continue(result.key, approve: true)
puts "approved: #{done.status} #{done.value.inspect}, output #{done.stdout.inspect}, plan now #{ada.plan}"
