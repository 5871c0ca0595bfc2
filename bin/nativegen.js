#!/usr/bin/env node
// The `nativegen` command. Installed from the package (compiled `dist/` beside `bin/`, no `src/`):
// the compiled JavaScript with plain node. Inside the repository: the TypeScript sources through
// tsx's loader (a development dependency), so no build step is needed there.
import { existsSync } from "node:fs"

const compiled = new URL("../dist/src/cli/main.js", import.meta.url)
const sources = new URL("../src/cli/main.ts", import.meta.url)

if (existsSync(compiled) && !existsSync(sources)) {
  await import(compiled.href)
} else {
  const { register } = await import("tsx/esm/api")
  register()
  await import(sources.href)
}
