import { Context, Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, AgentTool, type Hooks, SubAgent, ToolRegistry } from "effect-agent"

export const Order = Schema.Struct({
  id: Schema.String,
  item: Schema.String,
  cents: Schema.Int,
  refunded: Schema.Boolean
})
export type Order = typeof Order.Type

export class OrderNotFound extends Schema.TaggedError<OrderNotFound>()("OrderNotFound", {
  id: Schema.String
}) {}
export class PaymentsDown extends Schema.TaggedError<PaymentsDown>()("PaymentsDown", {
  provider: Schema.String,
  since: Schema.Date
}) {}

// The service the tools use: in production, a database and a payment provider.
export class Orders extends Context.Service<Orders, {
  readonly find: (id: string) => Effect.Effect<Order, OrderNotFound>
  readonly refund: (id: string) => Effect.Effect<Order, OrderNotFound | PaymentsDown>
}>()("app/Orders") {}

export const LookupOrder = AgentTool.annotate(
  Tool.make("lookup_order", {
    description: "An order by its id",
    parameters: Schema.Struct({ id: Schema.String }),
    success: Order,
    failure: OrderNotFound
  }),
  { timeout: "10 seconds" }
)

// A refund that fails stops the run: a person looks at it, no model works around it.
export const RefundOrder = AgentTool.annotate(
  Tool.make("refund_order", {
    description: "Refunds an order in full",
    parameters: Schema.Struct({ id: Schema.String }),
    success: Order,
    failure: Schema.Union([OrderNotFound, PaymentsDown])
  }),
  { fatal: true }
)

// A sub-agent that applies the refund policy. It has no model of its own: it uses the caller's.
export const policy = Agent.define({
  name: "policy",
  description: "Says whether an order may be refunded, and why",
  system: "You apply the refund policy: orders under 100 EUR are refunded at once.",
  input: Order
})

export const SupportTools = Toolkit.make(LookupOrder, RefundOrder, Agent.asTool(policy))

export const SupportToolsLive = ToolRegistry.layer(SupportTools).pipe(
  Layer.provide(SupportTools.toLayer(Effect.gen(function*() {
    const orders = yield* Orders
    return {
      lookup_order: ({ id }) => orders.find(id),
      refund_order: ({ id }) => orders.refund(id),
      policy: SubAgent.handler(policy)
    }
  })))
)

// What the agent answers with: the model gives it by calling its `final_answer` tool.
export const Resolution = Schema.Struct({
  orderId: Schema.String,
  action: Schema.Literals(["refunded", "declined"]),
  note: Schema.String
})

export const system = "You are a support agent. Look an order up before you act on it."

export const resolve = (request: string, plugins: ReadonlyArray<Hooks.PluginInput> = []) =>
  Agent.run({ system, prompt: request, output: Resolution, config: { maxTurns: 8 }, plugins })
