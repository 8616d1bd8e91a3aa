/**
 * Where the server keeps its sessions: each one's checkpoint (a
 * `CheckpointStore`), its event log (the trajectory, see `eventLog.ts`) and a
 * small record describing it (for listing without loading checkpoints).
 *
 * In a directory `dir`:
 *
 * - `dir/checkpoints/<id>/`: the checkpoint store's files;
 * - `dir/sessions/<id>/session.json`: the record, replaced atomically;
 * - `dir/sessions/<id>/trajectory.ndjson`: the events, one JSON line each.
 *
 * Every directory it creates is 0700 and every file 0600 (the umask only
 * takes bits away): records, trajectories and checkpoints hold every
 * client's prompts.
 *
 * Or all of it in memory, for tests and servers that need no durability.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as NodeFs from "node:fs"
import * as NodePath from "node:path"
import * as AgentConfig from "../../AgentConfig.ts"
import * as Message from "../../Message.ts"
import * as Outcome from "../../Outcome.ts"
import * as CheckpointStore from "../../session/CheckpointStore.ts"
import * as EventLog from "./eventLog.ts"

/**
 * The typed output a session asked for, by the name the server lists it
 * under, and its answer once the run gave one (its JSON form), unless it is
 * larger than the record keeps (then `bytes` says how large it was).
 */
export const OutputRecord = Schema.Struct({
  name: Schema.String,
  value: Schema.optionalKey(Schema.Unknown),
  bytes: Schema.optionalKey(Schema.Finite)
})
export type OutputRecord = typeof OutputRecord.Type

/**
 * What a session's record says: enough to list it and to know, after a
 * restart, whether its run must be resumed (`running`) and how: a
 * supervised session names the server's supervisor it runs under, and keeps
 * the config it was started with (a supervised run's checkpoint does not); a
 * session with a typed output names it.
 */
export const Record = Schema.Struct({
  id: Schema.String,
  title: Schema.String,
  status: Schema.Literals(["running", "finished", "failed"]),
  createdAt: Schema.Finite,
  updatedAt: Schema.Finite,
  turns: Schema.Finite,
  usage: Message.Usage,
  outcome: Schema.optionalKey(Outcome.Outcome),
  error: Schema.optionalKey(Schema.Struct({ _tag: Schema.String, message: Schema.String })),
  supervisor: Schema.optionalKey(Schema.String),
  config: Schema.optionalKey(AgentConfig.AgentConfig),
  output: Schema.optionalKey(OutputRecord)
})
export type Record = typeof Record.Type

const RecordJson = Schema.fromJsonString(Record)
const decodeRecord = Schema.decodeUnknownResult(RecordJson)
const encodeRecord = Schema.encodeSync(RecordJson)

/**
 * The store failed to read or write a record or a log.
 *
 * @category errors
 * @since 0.1.0
 */
export class StorageError extends Schema.TaggedError<StorageError>()("StorageError", {
  operation: Schema.String,
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `cannot ${this.operation} ${this.path}: ${this.reason}`
  }
}

export interface Store {
  readonly checkpoints: CheckpointStore.Service
  /** Every record, in no particular order; unreadable ones are reported and skipped. */
  readonly records: Effect.Effect<ReadonlyArray<Record>, StorageError>
  readonly save: (record: Record) => Effect.Effect<void, StorageError>
  /** Opens (creating) a session's event log storage. */
  readonly openLog: (id: string) => Effect.Effect<EventLog.Storage, StorageError>
  /** Where a session's event log is, for messages. */
  readonly describe: string
}

const reason = (error: unknown) => error instanceof Error ? error.message : String(error)

/** A store in memory. */
export const memory = (): Store => {
  const records = new Map<string, Record>()
  const logs = new Map<string, EventLog.Storage>()
  return {
    checkpoints: CheckpointStore.memory(),
    records: Effect.sync(() => Array.from(records.values())),
    save: (record) => Effect.sync(() => void records.set(record.id, record)),
    openLog: (id) =>
      Effect.sync(() => {
        let log = logs.get(id)
        if (log === undefined) {
          log = EventLog.memory()
          logs.set(id, log)
        }
        return log
      }),
    describe: "memory"
  }
}

/** A store in a directory (see the module documentation). */
export const directory = (dir: string): Store => {
  const root = NodePath.resolve(dir)
  const sessions = NodePath.join(root, "sessions")
  const sessionDir = (id: string) => NodePath.join(sessions, id)
  const recordFile = (id: string) => NodePath.join(sessionDir(id), "session.json")
  const attempt = <A>(operation: string, path: string, run: () => Promise<A>) =>
    Effect.tryPromise({ try: run, catch: (error) => new StorageError({ operation, path, reason: reason(error) }) })
  const prepare = async (id: string) => {
    await NodeFs.promises.mkdir(sessionDir(id), { recursive: true, mode: 0o700 })
    const stats = await NodeFs.promises.lstat(sessionDir(id))
    if (!stats.isDirectory()) throw new Error("not a directory")
  }
  return {
    checkpoints: Effect.runSync(CheckpointStore.fileSystem(NodePath.join(root, "checkpoints"))),
    records: Effect.gen(function*() {
      const names = yield* attempt("list", sessions, async () => {
        try {
          return await NodeFs.promises.readdir(sessions)
        } catch (error) {
          if (error instanceof Error && "code" in error && error.code === "ENOENT") return []
          throw error
        }
      })
      const out: Array<Record> = []
      for (const name of names) {
        const file = recordFile(name)
        const text = yield* attempt("read", file, () => readRegular(file)).pipe(
          Effect.catch((error) => Effect.as(Effect.logWarning(`agent server: ${error.message}; skipped`), undefined))
        )
        if (text === undefined) continue
        const record = decodeRecord(text)
        if (record._tag === "Failure" || record.success.id !== name) {
          yield* Effect.logWarning(`agent server: ${file} is not a session record; skipped`)
          continue
        }
        out.push(record.success)
      }
      return out
    }),
    save: (record) => {
      const file = recordFile(record.id)
      return attempt("write", file, async () => {
        await prepare(record.id)
        const temp = `${file}.${process.pid}.tmp`
        await NodeFs.promises.rm(temp, { force: true })
        const handle = await NodeFs.promises.open(
          temp,
          NodeFs.constants.O_WRONLY | NodeFs.constants.O_CREAT | NodeFs.constants.O_EXCL,
          0o600
        )
        try {
          await handle.writeFile(encodeRecord(record))
          await handle.sync()
        } finally {
          await handle.close()
        }
        await NodeFs.promises.rename(temp, file)
      })
    },
    openLog: (id) => {
      const file = NodePath.join(sessionDir(id), "trajectory.ndjson")
      return attempt("open", file, async () => {
        await prepare(id)
        return EventLog.file(file)
      })
    },
    describe: root
  }
}

/** A regular file's text (not through a link), at most 1 MiB: a record is small. */
const readRegular = async (file: string): Promise<string | undefined> => {
  let handle: NodeFs.promises.FileHandle
  try {
    handle = await NodeFs.promises.open(file, NodeFs.constants.O_RDONLY | NodeFs.constants.O_NOFOLLOW)
  } catch (error) {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") return undefined
    throw error
  }
  try {
    const stats = await handle.stat()
    if (!stats.isFile()) throw new Error("not a regular file")
    if (stats.size > 1024 * 1024) throw new Error("larger than 1 MiB")
    return await handle.readFile("utf8")
  } finally {
    await handle.close()
  }
}

export const isStorageError = (u: unknown): u is StorageError => u instanceof StorageError
