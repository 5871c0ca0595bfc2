// The engine child of a host that runs from the repository's sources (tests, benchmarks, tsx):
// the build of the sources as they are now (bin/sources-build.js), so the child runs the same
// code as its host. A host running compiled code spawns the `child.js` beside its own modules.
import { pathToFileURL } from "node:url"
import { currentBuild } from "./sources-build.js"

await import(pathToFileURL(`${await currentBuild()}/child.js`).href)
