/**
 * Conversations' transcripts in the runner storage, so that a conversation outlives its runner.
 * When a turn ends, the runner serving it records the turn's messages with the reply, under the
 * checkpoint the turn ended with (`nativegen_cluster_transcripts`; the last few checkpoints of
 * each conversation are kept, since a client may continue from an earlier one, e.g. after a turn
 * it never received whole). When the runner dies, its KV and token records die with it; the shard's next
 * owner finds the checkpoint unknown, and the turn is recomputed from the transcript
 * (ConversationEntity). The row is looked up only by a checkpoint it was recorded with: a
 * checkpoint the cluster never gave out finds nothing.
 *
 * The turn's Done chunk is passed on once the write is done (one write per turn, bounded retries;
 * a failed write is logged, and Done still goes out): a client never holds a checkpoint the
 * cluster could not recompute from, unless that write failed or the runner died between the two.
 * Then the checkpoint finds nothing, and the turn fails with the runtime's own `InvalidCheckpoint`,
 * as an unknown checkpoint does on a single server.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { ChatMessage, type Checkpoint } from "../domain/Inference.js"
import { retryStart, tablePrefix } from "./Storage.js"

export const table = `${tablePrefix}_transcripts`

const Messages = Schema.parseJson(Schema.Array(ChatMessage))
const encodeMessages = Schema.encodeSync(Messages)
const decodeMessages = Schema.decodeUnknownOption(Messages)

export class Transcripts extends Context.Tag("nativegen/cluster/Transcripts")<Transcripts, {
  /** Records the messages a turn of `conversation` ended with (its reply last) under the checkpoint it ended with. */
  readonly record: (conversation: string, messages: ReadonlyArray<ChatMessage>, checkpoint: Checkpoint) => Effect.Effect<void>
  /** The messages recorded with exactly this checkpoint, if any. */
  readonly lookup: (checkpoint: Checkpoint) => Effect.Effect<ReadonlyArray<ChatMessage> | undefined>
}>() {}

/** Creates the table when missing (retried while another runner creates it). */
export const createTable: Effect.Effect<void, SqlError, SqlClient.SqlClient> = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
    conversation TEXT NOT NULL,
    checkpoint_tokens INTEGER NOT NULL,
    checkpoint_hash TEXT NOT NULL,
    messages TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (conversation, checkpoint_tokens, checkpoint_hash)
  )`.pipe(Effect.retry(retryStart))
).pipe(Effect.asVoid)

/** Checkpoints kept per conversation, the newest. */
export const keptPerConversation = 4

const retryBusy = Schedule.exponential("10 millis").pipe(Schedule.jittered, Schedule.intersect(Schedule.recurs(4)))

export const make = Effect.gen(function*() {
  const client = yield* SqlClient.SqlClient
  const sql = client.withoutTransforms()
  // Created on first use, not at start: runners starting together already contend for the
  // storage's write lock (tables, WAL, registration, shard locks); a runner must not fail to start
  // for a table it needs only after its first turn.
  let created = false
  const table_ = Effect.suspend(() =>
    created ? Effect.void : Effect.tap(Effect.provideService(createTable, SqlClient.SqlClient, client), () => (created = true))
  )
  const write = (conversation: string, messages: ReadonlyArray<ChatMessage>, checkpoint: Checkpoint) =>
    Effect.zipRight(table_, sql.withTransaction(Effect.zipRight(
      sql`INSERT INTO ${sql(table)} (conversation, checkpoint_tokens, checkpoint_hash, messages, updated_at)
        VALUES (${conversation}, ${checkpoint.tokens}, ${checkpoint.hash}, ${encodeMessages(messages)}, ${new Date().toISOString()})
        ON CONFLICT (conversation, checkpoint_tokens, checkpoint_hash) DO UPDATE SET messages = excluded.messages,
          updated_at = excluded.updated_at`,
      sql`DELETE FROM ${sql(table)} WHERE conversation = ${conversation} AND updated_at < (
        SELECT MIN(updated_at) FROM (SELECT updated_at FROM ${sql(table)} WHERE conversation = ${conversation}
          ORDER BY updated_at DESC LIMIT ${keptPerConversation}) AS newest)`
    ))).pipe(
      Effect.asVoid,
      Effect.retry(retryBusy),
      Effect.catchAllCause((cause) =>
        Effect.logWarning("cluster: the conversation's transcript was not recorded", cause).pipe(
          Effect.annotateLogs({ service: "Transcripts", conversation })
        )
      )
    )
  const lookup = (checkpoint: Checkpoint) =>
    Effect.zipRight(table_, sql<{ messages: string }>`SELECT messages FROM ${sql(table)}
      WHERE conversation = ${checkpoint.conversation} AND checkpoint_tokens = ${checkpoint.tokens}
        AND checkpoint_hash = ${checkpoint.hash}`).pipe(
      Effect.retry(retryBusy),
      Effect.map((rows) => rows.length === 0 ? undefined : Option.getOrUndefined(decodeMessages(rows[0]!.messages))),
      Effect.catchAllCause((cause) =>
        Effect.as(
          Effect.logWarning("cluster: the conversation's transcript could not be read", cause).pipe(
            Effect.annotateLogs({ service: "Transcripts", conversation: checkpoint.conversation })
          ),
          undefined
        )
      )
    )
  return Transcripts.of({
    record: write,
    lookup
  })
})

export const layer: Layer.Layer<Transcripts, SqlError, SqlClient.SqlClient> = Layer.effect(Transcripts, make)
