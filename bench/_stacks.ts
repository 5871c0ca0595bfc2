/**
 * A development tool: the call stacks (source-mapped) whose samples pass through a frame matching
 * a pattern, heaviest first, from a .cpuprofile. Run: `node --import tsx bench/_stacks.ts FILE PATTERN [DEPTH]`.
 */
import * as Fs from "node:fs"
import { moduleOf, type Profile } from "./_profile.js"

const [file, pattern = "", depth = "14"] = process.argv.slice(2)
const p = JSON.parse(Fs.readFileSync(file!, "utf8")) as Profile
const byId = new Map(p.nodes.map((n) => [n.id, n]))
const parent = new Map<number, number>()
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const self = new Map<number, number>()
for (let i = 0; i < p.samples.length - 1; i++) self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + p.timeDeltas[i + 1]!)
const names = new Map<number, string>()
const name = (id: number) => {
  let s = names.get(id)
  if (s === undefined) {
    const f = byId.get(id)!.callFrame
    const { at, module } = moduleOf(f)
    names.set(id, s = `${f.functionName || "(anon)"} ${module} ${at}`)
  }
  return s
}
const stacks = new Map<string, number>()
let total = 0
for (const [id, us] of self) {
  if (byId.get(id)!.callFrame.functionName === "(idle)") continue
  const chain: Array<string> = []
  let matched = false
  for (let up: number | undefined = id; up !== undefined; up = parent.get(up)) {
    const nm = name(up)
    chain.push(nm)
    if (nm.includes(pattern)) matched = true
  }
  if (!matched) continue
  total += us
  const key = chain.slice(0, Number(depth)).join("\n    < ")
  stacks.set(key, (stacks.get(key) ?? 0) + us)
}
console.log(`sampled ms through "${pattern}": ${(total / 1000).toFixed(1)}`)
for (const [k, us] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.STACKS_TOP ?? 8))) console.log(`${(us / 1000).toFixed(2)} ms\n    ${k}\n`)
