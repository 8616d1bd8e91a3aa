/**
 * How long a test waits for what it expects (a run's end, a session's result, a stop) before it fails saying
 * so: a bound, not a measure of speed. A loaded machine (a whole suite beside two others on two cores) takes
 * seconds for what takes milliseconds when idle, and a run on PostgreSQL more (seen: past 60 s for a session
 * with an approval, at load 23–33, while the cluster tests started their databases and runners).
 */
import type { Duration } from "effect"

export const patience: Duration.Input = "90 seconds"
