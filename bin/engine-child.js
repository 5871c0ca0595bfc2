// The engine child (or, with `probe` as its argument, a backend probe: src/native/probe.ts) of a
// host that runs from the repository's sources (tests, benchmarks, tsx): the build of the
// sources as they are now (bin/sources-build.js), so the child runs the same code as its host. A
// host running compiled code spawns the `child.js` or `probe.js` beside its own modules.
import { pathToFileURL } from "node:url"
import { currentBuild } from "./sources-build.js"

const entry = process.argv[2] === "probe" ? "probe" : "child"
await import(pathToFileURL(`${await currentBuild()}/${entry}.js`).href)
