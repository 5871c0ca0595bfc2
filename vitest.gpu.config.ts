import { defineConfig } from "vitest/config"
import base from "./vitest.config.js"

// `npm run test:gpu`: only test/gpu, whose cases skip with a message where no GPU is found. The
// files run one at a time: they share one GPU, and the VRAM case reads the device's free memory
// (another file's loads moved it by -117 MiB in a concurrent run on the H200).
export default defineConfig({
  ...base,
  test: { ...base.test, include: ["test/gpu/**/*.test.ts"], exclude: ["**/node_modules/**"], fileParallelism: false }
})
