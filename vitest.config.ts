import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

// The suite keeps its generated models in the repository (fixtures/models.ts's defaultCacheDir
// would use $XDG_CACHE_HOME/nativegen/models); workers and engine children inherit this.
process.env.NATIVEGEN_MODEL_CACHE ||= Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), ".cache", "models")

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The GPU cases run with `npm run test:gpu` (vitest.gpu.config.ts), not in the normal suite.
    exclude: ["**/node_modules/**", "test/gpu/**"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Engine tests spawn real llama.cpp children; two cores cannot host many at once.
    maxWorkers: 2,
    minWorkers: 1,
    globalSetup: ["test/globalSetup.ts"],
    // The summary for people, and counts for .ci/run.
    reporters: ["default", ["json", { outputFile: ".cache/test-report.json" }]]
  }
})
