import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
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
