#!/usr/bin/env node
// The `nativegen` command: runs the TypeScript sources directly through tsx's loader (no build step).
import { register } from "tsx/esm/api"

register()
await import(new URL("../src/cli/main.ts", import.meta.url).href)
