import { defineConfig } from "vitest/config"
import base from "./vitest.config.js"

// `npm run test:gpu`: only test/gpu, whose cases skip with a message where no GPU is found.
export default defineConfig({
  ...base,
  test: { ...base.test, include: ["test/gpu/**/*.test.ts"], exclude: ["**/node_modules/**"] }
})
