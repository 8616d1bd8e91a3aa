/**
 * The benches' aggregation: min / median / max of a figure over runs, and how
 * the tables print them (shared by `run.ts` and `fullstack/run.ts`).
 */

/** A figure over runs. */
export interface Stat {
  readonly min: number
  readonly median: number
  readonly max: number
}

export const stat = (xs: ReadonlyArray<number>): Stat => {
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  const median = s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
  return { min: s[0]!, median, max: s[s.length - 1]! }
}

/** A number with fewer decimals the larger it is, or `digits` of them. */
export const num = (x: number, digits?: number): string => {
  const d = digits ?? (Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 10 ? 1 : 2)
  return x.toFixed(d)
}

/** `median (min–max)`, or the figure alone when every run gave the same. */
export const fmt = (s: Stat, digits?: number): string =>
  s.min === s.max ? num(s.median, digits) : `${num(s.median, digits)} (${num(s.min, digits)}–${num(s.max, digits)})`

/** A ratio as `median× (min–max)`. */
export const ratio = (s: Stat): string =>
  s.min === s.max ? `${num(s.median)}×` : `${num(s.median)}× (${num(s.min)}–${num(s.max)})`
