/**
 * A full-stack client: one library's own loop over its own OpenAI-compatible
 * provider, against the local server. Made once per process (as a server
 * keeps its clients on one long-lived runtime); each session runs the
 * workload's T tool turns and reports what it saw.
 */
export interface SessionOutcome {
  /** Times the `noop` handler ran. */
  readonly toolRuns: number
  /** The final answer as the library reports it. */
  readonly text: string
  /** Events the library delivered to the consumer. */
  readonly events: number
}

export interface Client {
  readonly name: string
  /** Runs one session of T tool turns against the server's `baseUrl` (…/v1). */
  session(toolTurns: number): Promise<SessionOutcome>
  /** Frees what the client holds (runtimes, connection pools). */
  close(): Promise<void>
}

export type MakeClient = (baseUrl: string) => Promise<Client>
