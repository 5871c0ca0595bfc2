/**
 * The token records of conversations held in host memory, bounded by count and by bytes, the
 * least recently used dropped first. A record whose tokens are in a slot is never dropped (there
 * are at most as many of those as slots): the slot's save needs them. A dropped conversation stays
 * verifiable from its sidecar on disk, when it has one.
 *
 * A plain synchronous structure: the Conversations service calls it from inside its effects.
 */

export interface Held {
  /** The conversation's tokens (prompt and output), which its checkpoints prove. */
  readonly tokens: Uint32Array
  /** The slot whose KV cache was last filled for this conversation, in engine incarnation `incarnation`. */
  readonly slot: number | undefined
  readonly incarnation: number
}

export interface Bounds {
  /** Records kept at most (slot-resident ones beyond this are kept too). */
  readonly maxConversations: number
  /** Approximate bytes of records kept at most (see `bytesOf`). */
  readonly maxBytes: number
}

/** Bytes a record is charged: its tokens (4 bytes each), its key (UTF-16) and a fixed entry overhead. */
export const ENTRY_OVERHEAD_BYTES = 160
export const bytesOf = (conversation: string, held: Held): number =>
  held.tokens.byteLength + conversation.length * 2 + ENTRY_OVERHEAD_BYTES

export interface Records {
  /** The record, marked as most recently used. */
  readonly get: (conversation: string) => Held | undefined
  /** The record, leaving its place in the LRU order alone. */
  readonly peek: (conversation: string) => Held | undefined
  /** Stores a record as most recently used, then drops least recently used ones over the bounds; returns those dropped. */
  readonly set: (conversation: string, held: Held) => ReadonlyArray<string>
  /** Marks the record as no longer in a slot (so it may be dropped), leaving its place in the LRU order alone. */
  readonly release: (conversation: string) => void
  readonly entries: () => IterableIterator<[string, Held]>
  readonly size: () => number
  readonly bytes: () => number
}

export const make = (bounds: Bounds): Records => {
  const map = new Map<string, Held>()
  let bytes = 0

  const remove = (conversation: string) => {
    const held = map.get(conversation)
    if (held === undefined) return
    map.delete(conversation)
    bytes -= bytesOf(conversation, held)
  }

  const over = () => map.size > bounds.maxConversations || bytes > bounds.maxBytes

  const set = (conversation: string, held: Held) => {
    remove(conversation)
    map.set(conversation, held)
    bytes += bytesOf(conversation, held)
    const dropped: Array<string> = []
    // Map iteration is in insertion order: least recently used first.
    for (const [c, h] of map) {
      if (!over()) break
      // The record just stored is kept even alone over the bounds: its checkpoint was just issued.
      if (h.slot !== undefined || c === conversation) continue
      remove(c)
      dropped.push(c)
    }
    return dropped
  }

  return {
    get: (conversation) => {
      const held = map.get(conversation)
      if (held !== undefined) {
        map.delete(conversation)
        map.set(conversation, held)
      }
      return held
    },
    peek: (conversation) => map.get(conversation),
    set,
    release: (conversation) => {
      const held = map.get(conversation)
      // Map.set on a present key keeps its position.
      if (held !== undefined && held.slot !== undefined) map.set(conversation, { ...held, slot: undefined })
    },
    entries: () => map.entries(),
    size: () => map.size,
    bytes: () => bytes
  }
}
