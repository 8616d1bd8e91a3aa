import { type Duration, Effect, Layer } from "effect"
import { ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { type Order, OrderNotFound, Orders, PaymentsDown, SupportToolsLive } from "./app.ts"

export const kettle: Order = { id: "A-1", item: "kettle", cents: 4999, refunded: false }

export interface Options {
  readonly payments?: "up" | "down"
  readonly latency?: Duration.Input
}

// Orders in memory: each test gets its own table, and can take the payments down or slow every lookup.
export const ordersTest = (table: ReadonlyArray<Order>, options: Options = {}) =>
  Layer.sync(Orders, () => {
    const rows = new Map(table.map((order) => [order.id, order]))
    const find = (id: string) =>
      Effect.suspend(() => {
        const order = rows.get(id)
        return order === undefined ? Effect.fail(new OrderNotFound({ id })) : Effect.succeed(order)
      })
    return Orders.of({
      find: (id) => options.latency === undefined ? find(id) : Effect.delay(find(id), options.latency),
      refund: (id) =>
        options.payments === "down"
          ? Effect.fail(new PaymentsDown({ provider: "acme-pay", since: new Date("2026-03-01T09:00:00Z") }))
          : Effect.map(find(id), (order) => {
            const refunded = { ...order, refunded: true }
            rows.set(id, refunded)
            return refunded
          })
    })
  })

// What every test runs on: the real tools over the mocked orders, a scripted model, and
// strict mode (a tool that throws, or returns what its Schema rejects, fails the test).
export const testLayer = (script: ScriptedModel.Script, orders: Layer.Layer<Orders> = ordersTest([kettle])) =>
  Layer.mergeAll(
    SupportToolsLive.pipe(Layer.provide(orders)),
    ScriptedModel.layer(script),
    Layer.succeed(ToolRegistry.FailOnDefect, true)
  )
