/**
 * The backend probe's entry point: started by the host (BackendProbe.ts) with one concrete
 * backend in NATIVEGEN_BACKEND, it loads that backend's llama.cpp build, loads the probe model
 * with every layer on the device and runs two decode steps: a build that loads but cannot run
 * its kernels here (a CUDA build without this GPU's architecture) fails now, in this throwaway
 * process, instead of in the engine child. It prints one JSON line (ProbeReport) and exits 0,
 * or exits non-zero with the reason on stderr. Child code: the host never imports it.
 */
import { getLlama, LlamaLogLevel } from "node-llama-cpp"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { childSettingsFromEnv } from "./ChildSettings.js"
import { writeProbeModel } from "./engine/ProbeModel.js"

const main = async () => {
  const settings = childSettingsFromEnv(process.env)
  const backend = settings.backend
  const started = performance.now()
  const llama = await getLlama({
    build: "never",
    gpu: backend === "cpu" ? false : backend,
    ...(settings.threads === "auto" ? {} : { maxThreads: settings.threads }),
    logLevel: LlamaLogLevel.error,
    progressLogs: false
  })
  if ((llama.gpu === false ? "cpu" : llama.gpu) !== backend) {
    throw new Error(`asked for ${backend}, node-llama-cpp loaded ${llama.gpu === false ? "cpu" : llama.gpu}`)
  }
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-probe-"))
  try {
    const modelPath = Path.join(dir, "probe.gguf")
    writeProbeModel(modelPath)
    const model = await llama.loadModel({ modelPath, gpuLayers: backend === "cpu" ? 0 : "max" })
    const context = await model.createContext({ contextSize: 64, batchSize: 64 })
    let steps = 0
    for await (const _token of context.getSequence().evaluate(model.tokenize("probe"), { temperature: 0 })) {
      if (++steps >= 2) break
    }
    await context.dispose()
    await model.dispose()
    const report = {
      backend,
      build: llama.buildType,
      release: llama.llamaCppRelease.release,
      devices: backend === "cpu" ? [] : await llama.getGpuDeviceNames(),
      milliseconds: Math.round(performance.now() - started)
    }
    process.stdout.write(`${JSON.stringify(report)}\n`)
  } finally {
    Fs.rmSync(dir, { recursive: true, force: true })
    await llama.dispose()
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`)
    process.exit(1)
  }
)
