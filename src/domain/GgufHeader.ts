/**
 * A GGUF header reader for the host (which never loads node-llama-cpp): magic, version, tensor
 * and key-value counts, `general.architecture`, the scalar metadata (strings, numbers, booleans:
 * file type, trained context, chat template, license, ...), the parameter count, the elements per
 * tensor type and
 * every tensor's data range checked to lie within the file. The store runs it before a model is activated, so a file that cannot be a
 * model llama.cpp loads is refused at import instead of at the next start. It reads the header
 * only (through `readAt`, in windows), never the tensor data, and every count and length in the
 * header is bounded by the file's size before anything is allocated for it.
 */
import * as Either from "effect/Either"

export const magic = "GGUF"
/** GGUF v1 (32-bit counts) is refused by llama.cpp; v2 and v3 share the layout read here. */
export const supportedVersions: ReadonlyArray<number> = [2, 3]
export const defaultAlignment = 32
/** GGML_MAX_DIMS. */
export const maxDimensions = 4

/** A scalar metadata value: strings, numbers (64-bit integers beyond 2^53 lose precision), booleans. */
export type GgufValue = string | number | boolean

/** What the header says, once it has been checked. */
export interface GgufHeader {
  readonly version: number
  readonly tensorCount: number
  readonly kvCount: number
  readonly architecture: string
  readonly alignment: number
  /** Every scalar key-value, in file order (arrays, such as the tokenizer's vocabulary, are left out). */
  readonly metadata: ReadonlyMap<string, GgufValue>
  /** The number of tensor elements (the model's parameters). */
  readonly parameterCount: number
  /** Where the tensor data section starts. */
  readonly dataOffset: number
  /** The end of the last tensor's bytes (at most the file size). */
  readonly dataEnd: number
  /** Elements per tensor type name (`F16`, `Q8_0`, ...). */
  readonly elementsByType: ReadonlyMap<string, number>
}

/** Why a file is not a GGUF model llama.cpp could load; `offset` is where reading stopped. */
export interface GgufDefect {
  readonly reason: string
  readonly offset: number
}

/**
 * Block size (elements) and bytes per block of each ggml tensor type, indexed by type id; `null`
 * for ids llama.cpp no longer accepts. Checked against `ggml_blck_size`/`ggml_type_size` of the
 * llama.cpp build node-llama-cpp 3.21.1 ships (ids 0 to 42).
 */
const tensorTypes: ReadonlyArray<readonly [name: string, blockSize: number, typeSize: number] | null> = [
  ["F32", 1, 4], ["F16", 1, 2], ["Q4_0", 32, 18], ["Q4_1", 32, 20], null, null,
  ["Q5_0", 32, 22], ["Q5_1", 32, 24], ["Q8_0", 32, 34], ["Q8_1", 32, 36],
  ["Q2_K", 256, 84], ["Q3_K", 256, 110], ["Q4_K", 256, 144], ["Q5_K", 256, 176], ["Q6_K", 256, 210], ["Q8_K", 256, 292],
  ["IQ2_XXS", 256, 66], ["IQ2_XS", 256, 74], ["IQ3_XXS", 256, 98], ["IQ1_S", 256, 50], ["IQ4_NL", 32, 18],
  ["IQ3_S", 256, 110], ["IQ2_S", 256, 82], ["IQ4_XS", 256, 136],
  ["I8", 1, 1], ["I16", 1, 2], ["I32", 1, 4], ["I64", 1, 8], ["F64", 1, 8], ["IQ1_M", 256, 56], ["BF16", 1, 2],
  null, null, null, ["TQ1_0", 256, 54], ["TQ2_0", 256, 66], null, null, null,
  ["MXFP4", 32, 17], ["NVFP4", 64, 36], ["Q1_0", 128, 18], ["Q2_0", 64, 18]
]

/** Metadata value types: fixed sizes where fixed; 8 = string, 9 = array. */
const fixedValueSizes: Readonly<Record<number, number>> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 }
const stringType = 8
const arrayType = 9

const utf8 = new TextDecoder("utf-8")
const latin1 = new TextDecoder("latin1")

/**
 * A defect found while reading. The cursor throws it (a header has thousands of fields, each read
 * may fail) and `read` turns it into its `Either`: nothing else is ever thrown out of this module.
 */
class Defect {
  constructor(readonly reason: string, readonly offset: number) {}
}

/** Sequential little-endian reads over `readAt`, through a window of `windowBytes`. */
class Cursor {
  position = 0
  private window: Uint8Array = new Uint8Array(0)
  private windowStart = 0

  constructor(
    private readonly readAt: (position: number, length: number) => Uint8Array,
    readonly size: number,
    private readonly windowBytes: number
  ) {}

  fail(reason: string): never {
    throw new Defect(reason, this.position)
  }

  /** Bytes left after the current position. */
  get remaining() {
    return this.size - this.position
  }

  private bytes(length: number, what: string): Uint8Array {
    if (length > this.remaining) this.fail(`the file ends inside ${what}`)
    const from = this.position - this.windowStart
    if (from < 0 || from + length > this.window.length) {
      this.window = this.readAt(this.position, Math.min(Math.max(length, this.windowBytes), this.remaining))
      this.windowStart = this.position
      if (this.window.length < length) this.fail(`the file ends inside ${what}`)
    }
    const start = this.position - this.windowStart
    this.position += length
    return this.window.subarray(start, start + length)
  }

  u8(what: string): number {
    return this.bytes(1, what)[0]!
  }

  u16(what: string): number {
    const b = this.bytes(2, what)
    return b[0]! | (b[1]! << 8)
  }

  u32(what: string): number {
    const b = this.bytes(4, what)
    return (b[0]! | (b[1]! << 8) | (b[2]! << 16) | (b[3]! << 24)) >>> 0
  }

  /** A u64 that must fit a safe integer (every count and length here is bounded by the file size). */
  u64(what: string): number {
    const low = this.u32(what)
    const high = this.u32(what)
    if (high >= 0x200000) this.fail(`${what} ${(BigInt(high) << 32n) | BigInt(low)} is out of range`)
    return high * 0x100000000 + low
  }

  /** The bytes of a fixed-size value, for typed decoding. */
  view(length: number, what: string): DataView {
    const b = this.bytes(length, what)
    return new DataView(b.buffer, b.byteOffset, length)
  }

  skip(length: number, what: string) {
    if (length > this.remaining) this.fail(`the file ends inside ${what}`)
    this.position += length
  }

  string(what: string): string {
    const length = this.u64(`the length of ${what}`)
    return utf8.decode(this.bytes(length, what))
  }

  latin1(length: number, what: string): string {
    return latin1.decode(this.bytes(length, what))
  }

  skipString(what: string) {
    this.skip(this.u64(`the length of ${what}`), what)
  }
}

const quote = (s: string) => JSON.stringify(s.length > 80 ? `${s.slice(0, 77)}...` : s)

/** Decodes a fixed-size scalar of metadata type `type` (0 to 7, 10 to 12). */
const scalarOf = (view: DataView, type: number): GgufValue => {
  switch (type) {
    case 0:
      return view.getUint8(0)
    case 1:
      return view.getInt8(0)
    case 2:
      return view.getUint16(0, true)
    case 3:
      return view.getInt16(0, true)
    case 4:
      return view.getUint32(0, true)
    case 5:
      return view.getInt32(0, true)
    case 6:
      return view.getFloat32(0, true)
    case 7:
      return view.getUint8(0) !== 0
    case 10:
      return Number(view.getBigUint64(0, true))
    case 11:
      return Number(view.getBigInt64(0, true))
    default:
      return view.getFloat64(0, true)
  }
}

/** Reads one metadata value of `type`; returns it when it is a scalar, else (an array) skips it. */
const readValue = (cursor: Cursor, type: number, key: string): GgufValue | undefined => {
  if (type === stringType) return cursor.string(`the value of ${quote(key)}`)
  const fixed = fixedValueSizes[type]
  if (fixed !== undefined) return scalarOf(cursor.view(fixed, `the value of ${quote(key)}`), type)
  if (type !== arrayType) return cursor.fail(`key ${quote(key)} has unknown value type ${type}`)
  const itemType = cursor.u32(`the item type of ${quote(key)}`)
  const count = cursor.u64(`the item count of ${quote(key)}`)
  const itemSize = fixedValueSizes[itemType]
  if (itemSize !== undefined) {
    if (count > cursor.remaining / itemSize) cursor.fail(`array ${quote(key)} of ${count} items does not fit in the file`)
    return void cursor.skip(count * itemSize, `array ${quote(key)}`)
  }
  if (itemType !== stringType) return cursor.fail(`array ${quote(key)} has unsupported item type ${itemType}`)
  if (count > cursor.remaining / 8) cursor.fail(`array ${quote(key)} of ${count} strings does not fit in the file`)
  for (let i = 0; i < count; i++) cursor.skipString(`item ${i} of ${quote(key)}`)
  return undefined
}

/**
 * Reads and checks the header of a GGUF file of `size` bytes. `readAt(position, length)` returns
 * up to `length` bytes from `position` (fewer only at the end of the file).
 */
export const read = (
  readAt: (position: number, length: number) => Uint8Array,
  size: number,
  windowBytes = 1 << 20
): Either.Either<GgufHeader, GgufDefect> => {
  const cursor: Cursor = new Cursor(readAt, size, windowBytes)
  try {
    if (size < magic.length) return Either.left({ reason: `no GGUF magic (the file has ${size} bytes)`, offset: 0 })
    const head = cursor.latin1(magic.length, "the magic")
    if (head !== magic) return Either.left({ reason: `no GGUF magic (the file starts with ${quote(head)})`, offset: 0 })
    const version = cursor.u32("the version")
    if (!supportedVersions.includes(version)) cursor.fail(`unsupported GGUF version ${version}`)
    const tensorCount = cursor.u64("the tensor count")
    const kvCount = cursor.u64("the key-value count")
    // Each key-value takes at least 12 bytes and each tensor info at least 32: bound both by the file.
    if (kvCount > cursor.remaining / 12) cursor.fail(`${kvCount} key-values cannot fit in the file`)
    if (tensorCount > cursor.remaining / 32) cursor.fail(`${tensorCount} tensors cannot fit in the file`)
    const keys = new Set<string>()
    const metadata = new Map<string, GgufValue>()
    let architecture: string | undefined
    let alignment = defaultAlignment
    for (let i = 0; i < kvCount; i++) {
      const key = cursor.string(`key ${i}`)
      if (keys.has(key)) cursor.fail(`duplicate key ${quote(key)}`)
      keys.add(key)
      const type = cursor.u32(`the type of ${quote(key)}`)
      const value = readValue(cursor, type, key)
      if (value !== undefined) metadata.set(key, value)
      if (key === "general.architecture") {
        if (typeof value !== "string" || type !== stringType) cursor.fail("general.architecture is not a string")
        architecture = value
      } else if (key === "general.alignment") {
        if (type !== 4 || typeof value !== "number" || value === 0 || (value & (value - 1)) !== 0) {
          cursor.fail("general.alignment is not a power of two (u32)")
        }
        alignment = value
      }
    }
    if (architecture === undefined) cursor.fail("no general.architecture")
    if (architecture === "") cursor.fail("general.architecture is empty")
    const tensors: Array<{ readonly name: string; readonly offset: number; readonly bytes: number }> = []
    const elementsByType = new Map<string, number>()
    let parameterCount = 0
    const names = new Set<string>()
    for (let i = 0; i < tensorCount; i++) {
      const name = cursor.string(`the name of tensor ${i}`)
      if (names.has(name)) cursor.fail(`duplicate tensor ${quote(name)}`)
      names.add(name)
      const dimensions = cursor.u32(`the dimension count of ${quote(name)}`)
      if (dimensions < 1 || dimensions > maxDimensions) cursor.fail(`tensor ${quote(name)} has ${dimensions} dimensions`)
      const shape: Array<number> = []
      for (let d = 0; d < dimensions; d++) shape.push(cursor.u64(`dimension ${d} of ${quote(name)}`))
      const typeId = cursor.u32(`the type of ${quote(name)}`)
      const type = tensorTypes[typeId]
      if (type === undefined || type === null) cursor.fail(`tensor ${quote(name)} has unknown type ${typeId}`)
      const [typeName, blockSize, typeSize] = type
      if (shape[0]! % blockSize !== 0) {
        cursor.fail(`tensor ${quote(name)}: its first dimension ${shape[0]} is not a multiple of ${typeName}'s block of ${blockSize}`)
      }
      const elements = shape.reduce((a, b) => a * b, 1)
      const bytes = (elements / blockSize) * typeSize
      if (!Number.isSafeInteger(bytes) || bytes > size) cursor.fail(`tensor ${quote(name)} of shape [${shape.join(", ")}] cannot fit in the file`)
      const offset = cursor.u64(`the offset of ${quote(name)}`)
      if (offset % alignment !== 0) cursor.fail(`tensor ${quote(name)} has offset ${offset}, not a multiple of the alignment ${alignment}`)
      tensors.push({ name, offset, bytes })
      parameterCount += elements
      elementsByType.set(typeName, (elementsByType.get(typeName) ?? 0) + elements)
    }
    const dataOffset = Math.ceil(cursor.position / alignment) * alignment
    let dataEnd = dataOffset
    for (const tensor of tensors) {
      const end = dataOffset + tensor.offset + tensor.bytes
      if (end > size) {
        return Either.left({
          reason: `tensor ${quote(tensor.name)} (${tensor.bytes} bytes at ${dataOffset + tensor.offset}) ends at ${end}, past the end of the file (${size} bytes)`,
          offset: cursor.position
        })
      }
      dataEnd = Math.max(dataEnd, end)
    }
    return Either.right({
      version,
      tensorCount,
      kvCount,
      architecture,
      alignment,
      dataOffset,
      dataEnd,
      metadata,
      parameterCount,
      elementsByType
    })
  } catch (e) {
    if (e instanceof Defect) return Either.left({ reason: e.reason, offset: e.offset })
    throw e
  }
}
