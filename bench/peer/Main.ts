/** Whether the module at `url` is the script node was started with (so that a benchmark script runs alone, and exports its measurement otherwise). */
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

export const isMain = (url: string): boolean =>
  process.argv[1] !== undefined && Path.resolve(process.argv[1]) === fileURLToPath(url)
