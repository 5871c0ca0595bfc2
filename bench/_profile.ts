/**
 * CPU profiles (V8's sampling profiler, as bench/_sigprof.cjs writes them) summarised as self time
 * per module and per function, mapped through the bundle's source maps, as shares of a CPU time
 * measured without the profiler (bench/tokencost.ts, bench/_followup-stages.ts).
 */
import * as Fs from "node:fs"
import * as Module from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { projectRoot } from "../fixtures/models.js"

interface CallFrame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
  readonly columnNumber: number
}
export interface Profile {
  readonly nodes: ReadonlyArray<{ readonly id: number; readonly callFrame: CallFrame; readonly children?: ReadonlyArray<number> }>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

const sourceMaps = new Map<string, Module.SourceMap | undefined>()
const sourceMapOf = (url: string): Module.SourceMap | undefined => {
  if (!sourceMaps.has(url)) {
    let map: Module.SourceMap | undefined
    try {
      const file = fileURLToPath(url)
      if (Fs.existsSync(`${file}.map`)) map = new Module.SourceMap(JSON.parse(Fs.readFileSync(`${file}.map`, "utf8")))
    } catch {
      map = undefined
    }
    sourceMaps.set(url, map)
  }
  return sourceMaps.get(url)
}

/** Where a frame's code comes from: a package (node_modules/<name>), a repository file, Node's internals, or V8's. */
export const moduleOf = (frame: CallFrame): { readonly module: string; readonly at: string } => {
  if (frame.url === "") return { module: frame.functionName, at: "" }
  let source = frame.url
  let line = frame.lineNumber + 1
  const map = frame.url.startsWith("file:") ? sourceMapOf(frame.url) : undefined
  const entry = map?.findEntry(frame.lineNumber, frame.columnNumber)
  if (entry !== undefined && "originalSource" in entry && entry.originalSource !== undefined) {
    // Relative to the bundle (or the package's dist file) it maps.
    source = new URL(entry.originalSource, frame.url).href
    line = entry.originalLine + 1
  }
  const path = source.startsWith("file:") ? fileURLToPath(source) : source
  const packaged = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)
  const module = packaged !== null
    ? packaged[1]!
    : path.startsWith("node:")
    ? "node internals"
    : Path.relative(projectRoot, Path.resolve(projectRoot, path.replace(/^.*?(?=src\/|bench\/|test\/)/, "")))
  const file = packaged !== null ? path.slice(path.indexOf(packaged[1]!) + packaged[1]!.length + 1) : Path.basename(path)
  return { module, at: `${file}:${line}` }
}

export interface ProfileSummary {
  /**
   * CPU ms (per token, or per turn) of the profiled process (or thread), measured in the rounds without the
   * profiler. The sampled times below are shares of it: the profiler's own cost and, on a loaded
   * machine, the time a sampled thread is runnable but not running inflate raw sample times.
   */
  readonly cpu: number
  readonly byModule: Array<{ readonly module: string; readonly msPerToken: number }>
  readonly byFunction: Array<{ readonly fn: string; readonly module: string; readonly msPerToken: number }>
  /** The repository's own functions (src/) with everything they call, each counted once per sample. */
  readonly ownInclusive: Array<{ readonly fn: string; readonly msPerToken: number }>
}

/** Self time per module and per function, as shares of the measured CPU per token (`cpu`), idle excluded. */
export const summarize = (profile: Profile, cpu: number, top = 15): ProfileSummary => {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]))
  const selfUs = new Map<number, number>()
  // Each sample's time is the delta to the next sample (as Chrome's DevTools attributes it).
  for (let i = 0; i < profile.samples.length - 1; i++) {
    const id = profile.samples[i]!
    selfUs.set(id, (selfUs.get(id) ?? 0) + profile.timeDeltas[i + 1]!)
  }
  const parents = new Map<number, number>()
  for (const n of profile.nodes) for (const child of n.children ?? []) parents.set(child, n.id)
  const places = new Map<number, { readonly module: string; readonly at: string }>()
  const placeOf = (id: number) => {
    let place = places.get(id)
    if (place === undefined) places.set(id, place = moduleOf(frames.get(id)!))
    return place
  }
  const ownInclusive = new Map<string, number>()
  const byModule = new Map<string, number>()
  const byFunction = new Map<string, { fn: string; module: string; us: number }>()
  let busy = 0
  for (const [id, us] of selfUs) {
    const frame = frames.get(id)!
    if (frame.functionName === "(idle)") continue
    busy += us
    const { at, module } = placeOf(id)
    const seen = new Set<string>()
    for (let up: number | undefined = id; up !== undefined; up = parents.get(up)) {
      const place = placeOf(up)
      if (!place.module.startsWith("src/")) continue
      const key = `${frames.get(up)!.functionName || "(anonymous)"} ${place.module}:${place.at.split(":")[1]}`
      if (seen.has(key)) continue
      seen.add(key)
      ownInclusive.set(key, (ownInclusive.get(key) ?? 0) + us)
    }
    byModule.set(module, (byModule.get(module) ?? 0) + us)
    const key = `${frame.functionName || "(anonymous)"} ${at}`
    const f = byFunction.get(key) ?? { fn: key, module, us: 0 }
    f.us += us
    byFunction.set(key, f)
  }
  const ms = (us: number) => (us / busy) * cpu
  return {
    cpu,
    byModule: Array.from(byModule, ([module, us]) => ({ module, msPerToken: ms(us) })).sort((a, b) => b.msPerToken - a.msPerToken),
    byFunction: Array.from(byFunction.values(), (f) => ({ fn: f.fn, module: f.module, msPerToken: ms(f.us) }))
      .sort((a, b) => b.msPerToken - a.msPerToken)
      .slice(0, top),
    ownInclusive: Array.from(ownInclusive, ([fn, us]) => ({ fn, msPerToken: ms(us) }))
      .sort((a, b) => b.msPerToken - a.msPerToken)
      .slice(0, top)
  }
}

