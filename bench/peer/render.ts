/**
 * `npx tsx bench/peer/render.ts`: writes bench/results/peer.md and peer.svg again from
 * bench/results/peer.json (after a change to the table or the chart, without measuring again).
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Report from "./Report.js"
import * as Result from "./Result.js"

const dir = Path.join(import.meta.dirname, "..", "results")
const result = Result.decode(Fs.readFileSync(Path.join(dir, "peer.json"), "utf8"))
Fs.writeFileSync(Path.join(dir, "peer.md"), Report.markdown(result))
Fs.writeFileSync(Path.join(dir, "peer.svg"), Report.svg(result))
console.log(`wrote ${Path.join(dir, "peer.md")} and peer.svg from peer.json`)
