/**
 * The engine adapter: everything the child does with node-llama-cpp. Runs only inside an engine
 * child process (the host never imports this module). Each native operation runs as one atomic
 * step through the step gate, in lane order (decision first), so a decision submitted between two
 * steps of a generation runs at the next step boundary, and an interrupted step always completes
 * before the interruption takes effect: the native engine is never left mid-call.
 */
import { Template } from "@huggingface/jinja"
import * as Effect from "effect/Effect"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { createRequire } from "node:module"
import {
  getLlama,
  GgufInsights,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  readGgufFileInfo,
  type Token
} from "node-llama-cpp"
import {
  EngineFailure,
  type EngineError,
  InvalidEngineRequest,
  ModelLoadFailed,
  RoleNotLoaded,
  TemplateError,
  UnknownGeneration
} from "../domain/EngineError.js"
import {
  type AdvanceEvent,
  type Backend,
  type ChatMessage,
  ContextPlan,
  DeviceInfo,
  HeadScore,
  HelloInfo,
  MemoryReading,
  LabelScore,
  type Lane,
  type LoadEvent,
  LoadedModel,
  MemoryEstimate,
  ModelPlan,
  DECODE_RUN_AHEAD,
  PROTOCOL_VERSION,
  type Role,
  type Sampling,
  type ScoreEvent,
  SpecialTokens,
  type StopReason
} from "./Protocol.js"
import type { Failpoints } from "./Failpoints.js"
import * as StepGate from "./StepGate.js"

export interface EngineOptions {
  readonly backend: Backend
  readonly threads: number
  /** Largest batch evaluated in one native call; prefill chunks never exceed it. */
  readonly batchSize: number
}

/** How failpoints reach outside the engine (the protocol channel); tests only. */
export interface FaultHooks {
  readonly failpoints: Failpoints | undefined
  readonly writeRaw: (bytes: Uint8Array) => void
  readonly exit: () => void
}

/** A model's chat template: parsed, or why it does not parse (a model can be used without one). */
type ChatTemplate =
  | { readonly _tag: "Parsed"; readonly template: Template }
  | { readonly _tag: "Unparsable"; readonly reason: string }

const parseTemplate = (source: unknown): ChatTemplate | undefined => {
  if (typeof source !== "string") return undefined
  try {
    return { _tag: "Parsed", template: new Template(source) }
  } catch (cause) {
    return { _tag: "Unparsable", reason: `it does not parse: ${reasonOf(cause)}` }
  }
}

interface Resident {
  readonly model: LlamaModel
  readonly context: LlamaContext
  readonly sequences: ReadonlyArray<LlamaContextSequence>
  readonly modelPath: string
  readonly template: ChatTemplate | undefined
  readonly vocabularySize: number
}

interface Generation {
  readonly id: string
  readonly sequenceIndex: number
  readonly sequence: LlamaContextSequence
  readonly model: LlamaModel
  readonly prompt: ReadonlyArray<Token>
  readonly sampling: Sampling
  readonly maxTokens: number
  readonly stopTokens: ReadonlySet<number>
  readonly prefillChunk: number
  readonly lane: Lane
  /** Prefill the whole prompt and finish without sampling. */
  readonly prefillOnly: boolean
  /** Prompt tokens (all but the last, unless prefill-only) in the sequence's KV cache. */
  prefilled: number
  iterator: AsyncGenerator<{ readonly token: Token; readonly confidence?: number }, void, void | Token | Token[]> | undefined
  /** Report each sampled token's probability (after sampling options). */
  readonly confidence: boolean
  readonly confidences: Array<number>
  readonly tokens: Array<number>
  readonly texts: Array<string>
  /** Tokens whose text is held back until their UTF-8 sequence completes. */
  pendingText: Array<number>
  finished: StopReason | undefined
}

/** Length of the common prefix of two token lists. */
const commonPrefix = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  let n = 0
  while (n < a.length && n < b.length && a[n] === b[n]) n++
  return n
}

/** How many ended-before-begun generation ids the engine remembers. */
const MAX_ENDED = 4096

/** node-llama-cpp's version, from the package.json above its resolved entry (it exports no subpath for it). */
const packageVersion = (): string => {
  let dir = Path.dirname(createRequire(import.meta.url).resolve("node-llama-cpp"))
  while (dir !== Path.dirname(dir)) {
    const file = Path.join(dir, "package.json")
    if (Fs.existsSync(file)) {
      const pkg: { name?: string; version?: string } = JSON.parse(Fs.readFileSync(file, "utf8"))
      if (pkg.name === "node-llama-cpp" && pkg.version !== undefined) return pkg.version
    }
    dir = Path.dirname(dir)
  }
  return "unknown"
}

const reasonOf = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

const invalid = (field: string, value: unknown, reason: string) =>
  new InvalidEngineRequest({ field, value: JSON.stringify(value) ?? String(value), reason })

const checkPositiveInt = (field: string, value: number) =>
  Number.isInteger(value) && value > 0 ? Effect.void : Effect.fail(invalid(field, value, "must be a positive integer"))

/** A head's labels with their log-likelihoods, softmax probabilities over the head, and ranks. */
const headScore = (
  head: { readonly name: string; readonly labels: ReadonlyArray<string> },
  labelTokens: ReadonlyMap<string, ReadonlyArray<number>>,
  logLikelihoods: ReadonlyMap<string, number>
) => {
  const lls = head.labels.map((l) => logLikelihoods.get(l)!)
  const max = Math.max(...lls)
  const weights = lls.map((ll) => (Number.isFinite(ll) ? Math.exp(ll - max) : 0))
  const total = weights.reduce((a, b) => a + b, 0)
  const probabilities = weights.map((w) => (total > 0 ? w / total : 1 / weights.length))
  const order = head.labels.map((_, i) => i).sort((a, b) => probabilities[b]! - probabilities[a]! || a - b)
  const ranks = new Array<number>(order.length)
  order.forEach((labelIndex, position) => (ranks[labelIndex] = position + 1))
  return new HeadScore({
    name: head.name,
    labels: head.labels.map((label, i) =>
      new LabelScore({
        label,
        tokens: labelTokens.get(label)!.length,
        logLikelihood: lls[i]!,
        probability: probabilities[i]!,
        rank: ranks[i]!
      })
    )
  })
}

export const makeEngine = Effect.fn("Engine.make")(function*(options: EngineOptions, faults?: FaultHooks) {
  const llama: Llama = yield* Effect.tryPromise({
    try: () =>
      getLlama({
        build: "never",
        gpu: options.backend === "cpu" ? false : options.backend,
        maxThreads: options.threads,
        logLevel: "error" as never,
        progressLogs: false
      }),
    catch: (cause) => new EngineFailure({ operation: "getLlama", reason: reasonOf(cause) })
  })
  const gate = yield* StepGate.make
  /** The decision sequence serves one score at a time: a score's chunks are separate steps. */
  const scoring = yield* Effect.makeSemaphore(1)
  const failpoints = faults?.failpoints
  let decodedTokens = 0
  let scored = 0
  const residents = new Map<Role, Resident>()
  const generations = new Map<string, Generation>()

  /** Runs one native step atomically, in lane order at the gate; interruption waits for the step. */
  const step = <A>(operation: string, run: () => Promise<A>, lane: Lane = "foreground") =>
    gate.run(
      lane,
      Effect.uninterruptible(
        Effect.tryPromise({ try: run, catch: (cause) => new EngineFailure({ operation, reason: reasonOf(cause) }) })
      )
    )

  /** Failpoints checked after each decoded token (tests only; nothing happens when unset). */
  const afterDecodedToken = () => {
    decodedTokens++
    if (failpoints === undefined || faults === undefined) return
    if (decodedTokens === failpoints.crashAfterTokens) process.kill(process.pid, "SIGKILL")
    if (decodedTokens === failpoints.garbageAfterTokens) faults.writeRaw(Buffer.from("\xc1\xc1 not msgpack \xc1", "latin1"))
    if (decodedTokens === failpoints.oversizedFrameAfterTokens) {
      // A msgpack str32 header announcing 1 GiB, then a trickle: the host must refuse, not buffer.
      faults.writeRaw(Buffer.concat([Buffer.from([0xdb, 0x40, 0x00, 0x00, 0x00]), Buffer.alloc(16 * 1024 * 1024, 0x61)]))
    }
    if (decodedTokens === failpoints.partialFrameAfterTokens) {
      faults.writeRaw(Buffer.from([0xdb, 0x00, 0x00, 0x10, 0x00, 0x61, 0x61]))
      faults.exit()
    }
  }

  const resident = (role: Role) =>
    Effect.suspend(() => {
      const r = residents.get(role)
      return r === undefined ? Effect.fail(new RoleNotLoaded({ role })) : Effect.succeed(r)
    })

  const hello = Effect.gen(function*() {
    const gpu = llama.gpu
    const devices: Array<DeviceInfo> = []
    if (gpu === false) {
      devices.push(new DeviceInfo({ name: "cpu", kind: "cpu", totalBytes: Os.totalmem(), freeBytes: Os.freemem() }))
    } else {
      const vram = yield* Effect.promise(() => llama.getVramState())
      const names = yield* Effect.promise(() => llama.getGpuDeviceNames())
      devices.push(
        new DeviceInfo({ name: names.join(", ") || gpu, kind: "gpu", totalBytes: vram.total, freeBytes: vram.free })
      )
    }
    return new HelloInfo({
      protocolVersion: PROTOCOL_VERSION,
      nodeLlamaCppVersion: packageVersion(),
      llamaCppRelease: llama.llamaCppRelease.release,
      backend: gpu === false ? "cpu" : gpu,
      threads: options.threads,
      pid: process.pid,
      devices
    })
  })

  /** A real reading, not node-llama-cpp's memoryUsage (which repeats the plan's reservation). */
  const memory = Effect.gen(function*() {
    const vramUsedBytes = llama.gpu === false ? 0 : (yield* Effect.promise(() => llama.getVramState())).used
    return new MemoryReading({ rssBytes: process.memoryUsage.rss(), vramUsedBytes })
  })

  const readInsights = (modelPath: string) =>
    Effect.tryPromise({
      try: async () => GgufInsights.from(await readGgufFileInfo(modelPath), llama),
      catch: (cause) => new ModelLoadFailed({ modelPath, reason: reasonOf(cause) })
    })

  const gpuLayers = () => (llama.gpu === false ? 0 : 1_000)

  // Whole bytes, rounded up: for an architecture llama.cpp does not know the estimator's figures
  // are fractional, and the plan must still reach the host (whose load then fails with the reason).
  const estimateOf = (e: { readonly cpuRam: number; readonly gpuVram: number }) =>
    new MemoryEstimate({ cpuBytes: Math.ceil(e.cpuRam), gpuBytes: Math.ceil(e.gpuVram) })

  const plan = (modelPath: string, contextSizes: ReadonlyArray<number>, sequences: number) =>
    Effect.gen(function*() {
      yield* checkPositiveInt("sequences", sequences)
      for (const size of contextSizes) yield* checkPositiveInt("contextSize", size)
      const insights = yield* readInsights(modelPath)
      const estimate = <A>(run: () => Promise<A>) =>
        Effect.tryPromise({ try: run, catch: (cause) => new ModelLoadFailed({ modelPath, reason: reasonOf(cause) }) })
      const layers = Math.min(gpuLayers(), insights.totalLayers)
      const weights = yield* estimate(() => insights.estimateModelResourceRequirementsV2({ gpuLayers: layers }))
      const contexts: Array<ContextPlan> = []
      for (const contextSize of contextSizes) {
        const c = yield* estimate(() =>
          insights.estimateContextResourceRequirementsV2({
            contextSize,
            sequences,
            batchSize: Math.min(options.batchSize, contextSize),
            modelGpuLayers: layers
          })
        )
        contexts.push(
          new ContextPlan({ contextSize, context: estimateOf(c) })
        )
      }
      return new ModelPlan({
        modelPath,
        trainedContextSize: insights.trainContextSize ?? 0,
        weights: estimateOf(weights),
        contexts
      })
    })

  const specialToken = (model: LlamaModel, text: string): number | null => {
    const tokens = model.tokenize(text, true)
    return tokens.length === 1 && model.detokenize(tokens, false) === "" ? tokens[0]! : null
  }

  const unloadRole = (role: Role) =>
    Effect.gen(function*() {
      const r = residents.get(role)
      if (r === undefined) return
      residents.delete(role)
      for (const [id, g] of generations) if (r.sequences.includes(g.sequence)) generations.delete(id)
      yield* step("unload", async () => {
        await r.context.dispose()
        await r.model.dispose()
      })
    })

  /** Loads a role's model and context, streaming load progress, then the loaded model with its measured memory. */
  const load = (role: Role, modelPath: string, contextSize: number, sequences: number): Stream.Stream<LoadEvent, EngineError> =>
    Stream.unwrapScoped(
      Effect.gen(function*() {
        yield* checkPositiveInt("contextSize", contextSize)
        yield* checkPositiveInt("sequences", sequences)
        if (failpoints?.crashDuringLoad === true) process.kill(process.pid, "SIGKILL")
        if (failpoints?.hangDuringLoad === true) return yield* Effect.never
        const insights = yield* readInsights(modelPath)
        yield* unloadRole(role)
        const progress = yield* Mailbox.make<LoadEvent, EngineError>()
        const loading = step("load", async () => {
          for (let i = 0; i < (failpoints?.slowLoadSteps ?? 0); i++) {
            progress.unsafeOffer({ _tag: "LoadProgress", fraction: 0 })
            await new Promise((resolve) => setTimeout(resolve, 200))
          }
          const model = await llama.loadModel({
            modelPath,
            gpuLayers: gpuLayers() === 0 ? 0 : "max",
            onLoadProgress: (fraction) => progress.unsafeOffer({ _tag: "LoadProgress", fraction })
          })
          try {
            const context = await model.createContext({
              contextSize,
              sequences,
              threads: options.threads,
              batchSize: Math.min(options.batchSize, contextSize)
            })
            return { model, context }
          } catch (cause) {
            await model.dispose()
            throw cause
          }
        }).pipe(
          Effect.mapError((e) => new ModelLoadFailed({ modelPath, reason: e.reason })),
          Effect.map(({ context, model }) => {
            const chatTemplate = insights.ggufFileInfo.metadata.tokenizer?.chat_template
            residents.set(role, {
              model,
              context,
              sequences: Array.from({ length: sequences }, () => context.getSequence()),
              modelPath,
              template: parseTemplate(chatTemplate),
              vocabularySize: insights.ggufFileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0
            })
            return new LoadedModel({
              role,
              modelPath,
              contextSize: context.contextSize,
              sequences,
              trainedContextSize: model.trainContextSize,
              measured: {
                modelBytes: model.memoryUsage.ram + model.memoryUsage.vram,
                contextBytes: context.memoryUsage.ram + context.memoryUsage.vram
              },
              specialTokens: new SpecialTokens({
                bos: model.tokens.bos,
                eos: model.tokens.eos,
                thinkOpen: specialToken(model, "<think>"),
                thinkClose: specialToken(model, "</think>"),
                toolOpen: specialToken(model, "<tool_call>"),
                toolClose: specialToken(model, "</tool_call>")
              })
            })
          }),
          Effect.flatMap((model) => progress.offer({ _tag: "Loaded", model })),
          Effect.zipRight(progress.end),
          Effect.catchAll((e) => progress.fail(e))
        )
        yield* Effect.forkScoped(loading)
        return Mailbox.toStream(progress)
      })
    )

  const tokenize = (role: Role, text: string, specialTokens: boolean) =>
    Effect.map(resident(role), (r) => r.model.tokenize(text, specialTokens) as ReadonlyArray<number>)

  const detokenize = (role: Role, tokens: ReadonlyArray<number>) =>
    Effect.map(resident(role), (r) => r.model.detokenize(tokens as Array<Token>, false))

  /** A chat as text through the model's own Jinja template. */
  const renderText = (role: Role, messages: ReadonlyArray<ChatMessage>, addGenerationPrompt: boolean) =>
    Effect.gen(function*() {
      const r = yield* resident(role)
      if (messages.length === 0) return yield* Effect.fail(invalid("messages", [], "at least one message is needed"))
      if (r.template === undefined) {
        return yield* Effect.fail(invalid("role", role, "the model has no chat template"))
      }
      const template = r.template
      if (template._tag === "Unparsable") {
        return yield* Effect.fail(new TemplateError({ role, modelPath: r.modelPath, reason: template.reason }))
      }
      // A real template can raise (`raise_exception`) or use a value it was not given: the
      // request's fault, reported with the template's own message.
      return yield* Effect.try({
        try: () =>
          template.template.render({
            messages: messages.map((m) => ({ role: m.role, content: m.content })),
            add_generation_prompt: addGenerationPrompt,
            bos_token: "",
            eos_token: ""
          }),
        catch: (cause) => new TemplateError({ role, modelPath: r.modelPath, reason: reasonOf(cause) })
      })
    })

  /** A generation sequence that no generation is using. */
  const idleSequence = (index: number) =>
    Effect.gen(function*() {
      const r = yield* resident("generation")
      const sequence = r.sequences[index]
      if (!Number.isInteger(index) || sequence === undefined) {
        return yield* Effect.fail(invalid("sequence", index, `must be an integer in [0, ${r.sequences.length})`))
      }
      for (const g of generations.values()) {
        if (g.sequence === sequence) return yield* Effect.fail(invalid("sequence", index, `busy with generation ${g.id}`))
      }
      return sequence
    })

  /**
   * Writes a sequence's state to `path` (the host's temp file; it renames it into place) and
   * fsyncs it before answering: an answered save is on disk. One step, so nothing else runs on the
   * engine meanwhile (the fsync's libuv work has the child's single pool thread to itself).
   */
  const saveState = (index: number, path: string) =>
    Effect.flatMap(idleSequence(index), (sequence) =>
      step("saveState", async () => {
        const { fileSize } = await sequence.saveStateToFile(path)
        const file = await Fs.promises.open(path, "r")
        try {
          await file.sync()
        } finally {
          await file.close()
        }
        return { fileBytes: fileSize, tokens: sequence.contextTokens.length }
      }, "utility"))

  const restoreState = (index: number, path: string) =>
    Effect.flatMap(idleSequence(index), (sequence) =>
      step("restoreState", async () => {
        await sequence.loadStateFromFile(path, { acceptRisk: true })
        return { tokens: sequence.contextTokens.length }
      }, "utility"))

  /** Renders a chat through the model's own Jinja template, ending with the assistant prompt. */
  const render = (role: Role, messages: ReadonlyArray<ChatMessage>, addGenerationPrompt = true) =>
    Effect.gen(function*() {
      const r = yield* resident(role)
      const text = yield* renderText(role, messages, addGenerationPrompt)
      const body = r.model.tokenize(text, true)
      const bos = r.model.tokens.bos
      return (bos !== null && r.model.tokens.shouldPrependBosToken ? [bos, ...body] : body) as ReadonlyArray<number>
    })

  /** Generation ids ended before they began (bounded; oldest forgotten first). */
  const ended = new Set<string>()

  const begin = (request: {
    readonly generationId: string
    readonly lane: Lane
    readonly sequence: number
    readonly prompt: ReadonlyArray<number>
    readonly sampling: Sampling
    readonly maxTokens: number
    readonly stopTokens: ReadonlyArray<number>
    readonly prefillChunk: number
    readonly prefillOnly?: boolean | undefined
    readonly confidence?: boolean | undefined
    readonly reuseOnGrid?: boolean | undefined
  }) =>
    Effect.gen(function*() {
      const r = yield* resident("generation")
      if (generations.has(request.generationId)) {
        return yield* Effect.fail(invalid("generationId", request.generationId, "already begun"))
      }
      if (request.prompt.length === 0) return yield* Effect.fail(invalid("prompt", [], "must not be empty"))
      yield* checkPositiveInt("maxTokens", request.maxTokens)
      yield* checkPositiveInt("prefillChunk", request.prefillChunk)
      const sequence = yield* idleSequence(request.sequence)
      const badToken = request.prompt.find((t) => !Number.isInteger(t) || t < 0 || t >= r.vocabularySize)
      if (badToken !== undefined) return yield* Effect.fail(invalid("prompt", badToken, "is not a token of the model"))
      const needed = request.prompt.length + request.maxTokens
      if (needed > r.context.contextSize) {
        return yield* Effect.fail(
          invalid("maxTokens", request.maxTokens, `prompt ${request.prompt.length} + max tokens exceeds context ${r.context.contextSize}`)
        )
      }
      // Keep the longest cached prefix of the prompt (never the last token: it is evaluated to
      // sample; prefill-only keeps all of it). On the grid, only whole prefill chunks are kept, so
      // the rest is split into the same batches as a cold run (bit-identical probabilities).
      const prefillChunk = Math.min(request.prefillChunk, options.batchSize)
      const candidates = (request.prefillOnly === true ? request.prompt : request.prompt.slice(0, -1)) as Array<Token>
      const keep = request.reuseOnGrid === true
        ? candidates.slice(0, Math.floor(commonPrefix(sequence.contextTokens, candidates) / prefillChunk) * prefillChunk)
        : candidates
      yield* step("adaptState", () => sequence.adaptStateToTokens(keep, false), request.lane)
      const reused = sequence.nextTokenIndex
      // The host ended it while this Begin was on its way (its caller was interrupted): never register it.
      if (ended.delete(request.generationId)) {
        return yield* Effect.fail(invalid("generationId", request.generationId, "was ended before it began"))
      }
      generations.set(request.generationId, {
        id: request.generationId,
        sequenceIndex: request.sequence,
        sequence,
        model: r.model,
        prompt: request.prompt as Array<Token>,
        sampling: request.sampling,
        maxTokens: request.maxTokens,
        stopTokens: new Set(request.stopTokens),
        prefillChunk,
        lane: request.lane,
        prefillOnly: request.prefillOnly === true,
        prefilled: reused,
        iterator: undefined,
        confidence: request.confidence === true,
        confidences: [],
        tokens: [],
        texts: [],
        pendingText: [],
        finished: undefined
      })
      return { reusedTokens: reused }
    })

  const generation = (generationId: string) =>
    Effect.suspend(() => {
      const g = generations.get(generationId)
      return g === undefined ? Effect.fail(new UnknownGeneration({ generationId })) : Effect.succeed(g)
    })

  /** Text for a newly sampled token; held back while it ends in an incomplete UTF-8 sequence. */
  const textOf = (g: Generation, token: number): string => {
    g.pendingText.push(token)
    // Held-back tokens are already in g.tokens (the new one is not yet): the context ends before them.
    const end = g.tokens.length - (g.pendingText.length - 1)
    const context = g.tokens.slice(Math.max(0, end - 8), end) as Array<Token>
    const text = g.model.detokenize(g.pendingText as Array<Token>, false, context)
    if (text.endsWith("\uFFFD") && g.pendingText.length < 4) return ""
    g.pendingText = []
    return text
  }

  /** Where prefill stops: before the last prompt token (it is evaluated to sample), or at the end. */
  const prefillEnd = (g: Generation) => (g.prefillOnly ? g.prompt.length : g.prompt.length - 1)

  /** One step: a prefill chunk or one decoded token. */
  const advanceOnce = (g: Generation): Effect.Effect<AdvanceEvent, EngineError> => {
    const last = prefillEnd(g)
    if (g.prefilled < last) {
      // Chunks end on the grid of multiples of the chunk size, wherever reuse left off: a prompt
      // whose cached part ends on the grid is split into the same batches as a cold run.
      const chunkEnd = (Math.floor(g.prefilled / g.prefillChunk) + 1) * g.prefillChunk
      const chunk = g.prompt.slice(g.prefilled, Math.min(chunkEnd, last))
      return Effect.map(
        step("prefill", async () => {
          await g.sequence.evaluateWithoutGeneratingNewTokens(chunk as Array<Token>)
          g.prefilled += chunk.length
        }, g.lane),
        // Read after the step: the tokens prefilled so far, this chunk included.
        () => ({ _tag: "Prefilled", done: g.prefilled, total: g.prompt.length }) as const
      )
    }
    return Effect.map(
      step("decode", async () => {
        if (failpoints?.hangAtStep !== undefined && decodedTokens + 1 >= failpoints.hangAtStep) {
          await new Promise<never>(() => {})
        }
        g.iterator ??= g.sequence.evaluateWithMetadata([g.prompt[last]!], { confidence: g.confidence }, {
          yieldEogToken: true,
          temperature: g.sampling.temperature,
          ...(g.sampling.topK !== undefined ? { topK: g.sampling.topK } : {}),
          ...(g.sampling.topP !== undefined ? { topP: g.sampling.topP } : {}),
          ...(g.sampling.seed !== undefined ? { seed: g.sampling.seed } : {})
        })
        const next = await g.iterator.next()
        if (next.done === true) throw new Error("the sequence ended its evaluation")
        const token = next.value.token as number
        if (g.model.isEogToken(next.value.token)) {
          g.finished = "endOfGeneration"
          return { _tag: "Finished", reason: g.finished, generated: g.tokens.length } as const
        }
        if (g.stopTokens.has(token)) {
          g.finished = "stopToken"
          return { _tag: "Finished", reason: g.finished, generated: g.tokens.length } as const
        }
        const text = textOf(g, token)
        g.tokens.push(token)
        g.texts.push(text)
        const confidence = next.value.confidence
        if (confidence !== undefined) g.confidences.push(confidence)
        if (g.tokens.length >= g.maxTokens) g.finished = "maxTokens"
        afterDecodedToken()
        return { _tag: "Token", index: g.tokens.length - 1, token, text, ...(confidence === undefined ? {} : { confidence }) } as const
      }, g.lane),
      (event): AdvanceEvent => event
    )
  }

  /**
   * Streams the generation's steps from `fromIndex`: first what was already produced past that
   * index (the host may have missed it when it paused), then new steps until it finishes.
   */
  const advance = (generationId: string, fromIndex: number): Stream.Stream<AdvanceEvent, EngineError> =>
    Stream.unwrap(
      Effect.gen(function*() {
        const g = yield* generation(generationId)
        if (!Number.isInteger(fromIndex) || fromIndex < 0 || fromIndex > g.tokens.length) {
          return yield* Effect.fail(invalid("fromIndex", fromIndex, `must be in [0, ${g.tokens.length}]`))
        }
        const replay = g.tokens.slice(fromIndex).map((token, i): AdvanceEvent => {
          const confidence = g.confidences[fromIndex + i]
          return { _tag: "Token", index: fromIndex + i, token, text: g.texts[fromIndex + i]!, ...(confidence === undefined ? {} : { confidence }) }
        })
        const prefill = Stream.repeatEffectOption(
          Effect.suspend(() =>
            g.prefilled < prefillEnd(g) ? Effect.mapError(advanceOnce(g), Option.some) : Effect.fail(Option.none())
          )
        )
        let finishedSent = false
        const decode = Stream.repeatEffectOption(
          Effect.suspend((): Effect.Effect<AdvanceEvent, Option.Option<EngineError>> => {
            if (finishedSent) return Effect.fail(Option.none())
            if (g.prefillOnly) g.finished ??= "maxTokens"
            if (g.finished !== undefined) {
              finishedSent = true
              return Effect.succeed({ _tag: "Finished", reason: g.finished, generated: g.tokens.length })
            }
            return Effect.tap(Effect.mapError(advanceOnce(g), Option.some), (e) => {
              if (e._tag === "Finished") finishedSent = true
            })
          })
        )
        // Prefill chunks go one at a time (each is long; a cancel lands at the next chunk). Decode
        // runs up to DECODE_RUN_AHEAD steps ahead of the host's acknowledgements, so the socket
        // round trip overlaps the next step instead of adding to it.
        return Stream.fromIterable(replay).pipe(
          Stream.concat(prefill),
          Stream.concat(Stream.buffer(decode, { capacity: DECODE_RUN_AHEAD }))
        )
      })
    )

  const end = (generationId: string) =>
    Effect.suspend(() => {
      const g = generations.get(generationId)
      if (g === undefined) {
        // An End may overtake its Begin (the host stops waiting for a Begin it was interrupted in):
        // remember it, so that Begin does not register a generation nobody will end.
        ended.add(generationId)
        if (ended.size > MAX_ENDED) ended.delete(ended.values().next().value!)
        return Effect.void
      }
      generations.delete(generationId)
      const iterator = g.iterator
      return iterator === undefined ? Effect.void : Effect.ignore(step("end", async () => void (await iterator.return())))
    })

  /**
   * Scores labels after a prompt on the decision model, as a stream: a Prefilled event per prompt
   * chunk, then Scored (the last chunk and the labels are one step). Each chunk is its own step in
   * the decision lane, so a cancel lands at the next chunk and other lanes' steps can run between
   * chunks. Only whole chunks of a cached prefix are kept, so a prompt is always split into the
   * same batches and its probabilities do not depend on what was scored before it.
   */
  const score = (
    prompt: ReadonlyArray<number>,
    heads: ReadonlyArray<{ readonly name: string; readonly labels: ReadonlyArray<string> }>,
    prefillChunk: number
  ): Stream.Stream<ScoreEvent, EngineError> =>
    Stream.unwrapScoped(Effect.gen(function*() {
      const r = yield* resident("decision")
      if (prompt.length === 0) return yield* Effect.fail(invalid("prompt", [], "must not be empty"))
      if (heads.length === 0) return yield* Effect.fail(invalid("heads", [], "at least one head is needed"))
      yield* checkPositiveInt("prefillChunk", prefillChunk)
      const names = new Set<string>()
      for (const head of heads) {
        if (names.has(head.name)) return yield* Effect.fail(invalid("head", head.name, "duplicate head name"))
        names.add(head.name)
        if (head.labels.length === 0) return yield* Effect.fail(invalid(`head ${head.name} labels`, [], "must not be empty"))
        const seen = new Set<string>()
        for (const label of head.labels) {
          if (label.length === 0) return yield* Effect.fail(invalid(`head ${head.name} label`, label, "must not be empty"))
          if (seen.has(label)) return yield* Effect.fail(invalid(`head ${head.name} labels`, label, "duplicate label"))
          seen.add(label)
        }
      }
      const badToken = prompt.find((t) => !Number.isInteger(t) || t < 0 || t >= r.vocabularySize)
      if (badToken !== undefined) return yield* Effect.fail(invalid("prompt", badToken, "is not a token of the model"))
      const sequence = r.sequences[0]!
      const context = prompt.slice(0, -1) as Array<Token>
      const lastPromptToken = prompt[prompt.length - 1]! as Token
      const labelTokens = new Map<string, ReadonlyArray<Token>>()
      for (const head of heads) for (const l of head.labels) labelTokens.set(l, r.model.tokenize(l, false))
      const longest = Math.max(...Array.from(labelTokens.values(), (t) => t.length))
      if (prompt.length + longest > r.context.contextSize) {
        return yield* Effect.fail(
          invalid("prompt", prompt.length, `prompt + longest label (${longest}) exceeds context ${r.context.contextSize}`)
        )
      }
      if (failpoints?.failScore === true) {
        return yield* Effect.fail(new EngineFailure({ operation: "score", reason: "failpoint failScore" }))
      }
      if (failpoints?.hangScore === true && scored++ > 0) return yield* Effect.never
      yield* Effect.acquireRelease(scoring.take(1), () => scoring.release(1))
      const chunk = Math.min(prefillChunk, options.batchSize)
      /** Teacher-forced log-likelihood of one label after the prefilled prompt; the label is erased again. */
      const labelLogLikelihood = async (tokens: ReadonlyArray<Token>) => {
        const items = [lastPromptToken, ...tokens.slice(0, -1)].map(
          (token) => [token, { generateNext: { probabilities: true, options: { temperature: 0 } } }] as [Token, { generateNext: { probabilities: true; options: { temperature: 0 } } }]
        )
        try {
          const outputs = await sequence.controlledEvaluate(items)
          let sum = 0
          tokens.forEach((token, i) => {
            const p = outputs[i]?.next?.probabilities?.get(token) ?? 0
            sum += Math.log(p)
          })
          return sum
        } finally {
          await sequence.eraseContextTokenRanges([{ start: context.length, end: sequence.nextTokenIndex }])
        }
      }
      /** Prompt tokens in the sequence; undefined until the cached prefix was adapted (first step). */
      let prefilled: number | undefined
      let finished = false
      // One step per chunk: the first also trims the cache, the last also scores the labels (a
      // prompt of one chunk is one step, as before chunking).
      const advance = step("score", async (): Promise<ScoreEvent> => {
        if (prefilled === undefined) {
          const keep = context.slice(0, Math.floor(commonPrefix(sequence.contextTokens, context) / chunk) * chunk)
          await sequence.adaptStateToTokens(keep, false)
          prefilled = sequence.nextTokenIndex
        }
        if (prefilled < context.length) {
          const end = Math.min((Math.floor(prefilled / chunk) + 1) * chunk, context.length)
          await sequence.evaluateWithoutGeneratingNewTokens(context.slice(prefilled, end))
          prefilled = end
          if (prefilled < context.length) return { _tag: "Prefilled", done: prefilled, total: context.length }
        }
        const logLikelihoods = new Map<string, number>()
        for (const [label, tokens] of labelTokens) logLikelihoods.set(label, await labelLogLikelihood(tokens))
        finished = true
        return { _tag: "Scored", heads: heads.map((head) => headScore(head, labelTokens, logLikelihoods)) }
      }, "decision")
      return Stream.repeatEffectOption(
        Effect.suspend(() => (finished ? Effect.fail(Option.none()) : Effect.mapError(advance, Option.some)))
      )
    }))

  const dispose = Effect.gen(function*() {
    for (const id of Array.from(generations.keys())) yield* end(id)
    for (const role of Array.from(residents.keys())) yield* Effect.ignore(unloadRole(role))
    yield* Effect.promise(() => llama.dispose())
  })

  return { hello, memory, renderText, saveState, restoreState, plan, load, unload: unloadRole, tokenize, detokenize, render, begin, advance, end, score, dispose } as const
})

export type Engine = Effect.Effect.Success<ReturnType<typeof makeEngine>>
