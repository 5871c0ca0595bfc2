#!/usr/bin/env node
// The `nativegen` command. Installed from the package (compiled `dist/` beside `bin/`, no `src/`):
// the compiled JavaScript. Inside the repository: the build of the sources as they are now
// (bin/sources-build.js: an esbuild bundle under .cache/build/, rebuilt whenever a source changed).
import { existsSync } from "node:fs"
import { pathToFileURL } from "node:url"

const compiled = new URL("../dist/src/cli/main.js", import.meta.url)
const sources = new URL("../src/cli/main.ts", import.meta.url)

if (existsSync(compiled) && !existsSync(sources)) {
  await import(compiled.href)
} else {
  const { currentBuild } = await import("./sources-build.js")
  await import(pathToFileURL(`${await currentBuild()}/main.js`).href)
}
