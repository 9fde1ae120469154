# frozen_string_literal: true

# A plain object standing in for an app's models.
class DeskTools
  class NotFound < Glovebox::ToolError; end

  attr_reader :changed

  def initialize = @changed = []

  def orders(status: nil)
    all = [{ id: 1, total: 30.5, status: :shipped }, { id: 2, total: 99, status: :pending }]
    status ? all.select { |o| o[:status].to_s == status } : all
  end

  def customer(id)
    raise NotFound, "no customer #{id}" unless id == 42

    { "id" => 42, "name" => "Ada", "balance" => 2**70 }
  end

  def explode = raise("SELECT * FROM secrets WHERE token='abc' failed")

  def change_plan(plan)
    @changed << plan
    "plan is #{plan}"
  end

  def blob = "\x00\xffbytes".b

  def echo(v) = v

  def handle = Object.new

  def glovebox_tool_methods = %i[orders customer explode change_plan blob echo handle]

  def reset! = @changed.clear # public, but outside the ceiling
end
