/**
 * Building and running llama-server for the peer benchmark: the cache directory, the CPU variant
 * read from ggml's own list and chosen as ggml's loader would, and the cmake and server command lines.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as LlamaServer from "../../bench/peer/LlamaServer.js"
import { projectRoot } from "../../fixtures/models.js"

const bundledCmakeLists = (): string | undefined => {
  // The bundle is a git bundle; its ggml CMakeLists comes from a clone, so a cut-down copy of the
  // shape is checked here, and the real file where a cache holds one.
  const release = LlamaServer.release(projectRoot)
  const file = Path.join(LlamaServer.cacheDir(release), "src", "ggml", "src", "CMakeLists.txt")
  return Fs.existsSync(file) ? Fs.readFileSync(file, "utf8") : undefined
}

const sample = `
function(ggml_add_cpu_backend_variant tag_name)
endfunction()
if (GGML_CPU_ALL_VARIANTS)
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sse42              SSE42)
        ggml_add_cpu_backend_variant(haswell            SSE42 AVX F16C FMA AVX2 BMI2)
        ggml_add_cpu_backend_variant(skylakex           SSE42 AVX F16C FMA AVX2 BMI2 AVX512)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(zen4           SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16)
        endif()
        ggml_add_cpu_backend_variant(alderlake          SSE42 AVX F16C FMA AVX2 BMI2 AVX_VNNI)
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
        ggml_add_cpu_backend_variant(armv8.0_1)
    endif()
endif()
`
const haswellFlags = new Set(["sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"])
const zen4Flags = new Set([...haswellFlags, "avx512f", "avx512vbmi", "avx512_vnni", "avx512_bf16"])

describe("bench/peer LlamaServer", () => {
  it("the cache directory: the override, else XDG_CACHE_HOME, else ~/.cache, under nativegen/llama-server/<release>", () => {
    assert.strictEqual(LlamaServer.cacheDir("v1", { NATIVEGEN_LLAMA_SERVER_DIR: "/x/y" }), "/x/y")
    assert.strictEqual(LlamaServer.cacheDir("v1", { XDG_CACHE_HOME: "/c" }), "/c/nativegen/llama-server/v1")
    assert.match(LlamaServer.cacheDir("v1", {}), /\/\.cache\/nativegen\/llama-server\/v1$/)
  })

  it("the release is node-llama-cpp's", () => {
    assert.match(LlamaServer.release(projectRoot), /^[\w.-]+$/)
  })

  it("the x86 variants are read from the x86 branch only, with their features", () => {
    const variants = LlamaServer.parseX86Variants(sample)
    assert.deepStrictEqual(variants.map((v) => v.name), ["x64", "sse42", "haswell", "skylakex", "zen4", "alderlake"])
    assert.deepStrictEqual(variants[0]!.features, [])
    assert.deepStrictEqual(variants[2]!.features, ["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"])
  })

  it("the real ggml list, where a cache holds the source, has the variants node-llama-cpp ships", () => {
    const text = bundledCmakeLists()
    if (text === undefined) return
    const names = LlamaServer.parseX86Variants(text).map((v) => v.name)
    const shipped = Fs.readdirSync(Path.join(projectRoot, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64"))
      .flatMap((f) => /^libggml-cpu-(.+)\.so$/.exec(f)?.[1] ?? [])
    assert.deepStrictEqual([...names].sort(), [...shipped].sort())
  })

  it("the chosen variant is the one with the most features the CPU has", () => {
    const variants = LlamaServer.parseX86Variants(sample)
    assert.strictEqual(LlamaServer.chooseVariant(variants, zen4Flags)?.name, "zen4")
    assert.strictEqual(LlamaServer.chooseVariant(variants, haswellFlags)?.name, "haswell")
    assert.strictEqual(LlamaServer.chooseVariant(variants, new Set())?.name, "x64")
    assert.strictEqual(LlamaServer.chooseVariant(variants, new Set([...haswellFlags, "avx_vnni"]))?.name, "alderlake")
  })

  it.prop("a chosen variant needs no feature the CPU lacks", [fc.subarray([...zen4Flags, "avx_vnni"])], ([flags]) => {
    const chosen = LlamaServer.chooseVariant(LlamaServer.parseX86Variants(sample), new Set(flags))
    return chosen !== undefined && LlamaServer.parseX86Variants(sample).every((v) =>
      v.features.length <= chosen.features.length || !v.features.every((f) => flags.includes(({
        SSE42: "sse4_2", AVX: "avx", F16C: "f16c", FMA: "fma", AVX2: "avx2", BMI2: "bmi2", AVX512: "avx512f",
        AVX512_VBMI: "avx512vbmi", AVX512_VNNI: "avx512_vnni", AVX512_BF16: "avx512_bf16", AVX_VNNI: "avx_vnni"
      } as Record<string, string>)[f]!)))
  })

  it("cpuinfo flags come from the first processor's flags line", () => {
    const flags = LlamaServer.parseCpuFlags("processor\t: 0\nflags\t\t: fpu sse4_2 avx2\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert.deepStrictEqual([...flags], ["fpu", "sse4_2", "avx2"])
  })

  it("cmake: a static Release build without OpenMP, curl or native tuning, every variant feature on or off", () => {
    const zen4 = LlamaServer.parseX86Variants(sample).find((v) => v.name === "zen4")!
    const args = LlamaServer.cmakeArguments({ source: "/s", build: "/b", generator: "Ninja", variant: zen4 })
    for (const expected of ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_INT8=OFF"]) {
      assert.include(args, expected)
    }
    assert.strictEqual(args.filter((a) => a.startsWith("-DGGML_") && (a.endsWith("=ON") || a.endsWith("=OFF")) && LlamaServer.x86Features.some((f) => a.startsWith(`-DGGML_${f}=`))).length, LlamaServer.x86Features.length)
    assert.include(LlamaServer.cmakeArguments({ source: "/s", build: "/b", generator: "Ninja", variant: undefined }), "-DGGML_NATIVE=ON")
  })

  it("the server: loopback, the threads for decode and prefill, context, batch, greedy, parallel only when asked", () => {
    const args = LlamaServer.serverArguments({ model: "/m.gguf", port: 1234, threads: 2, contextSize: 8192, batchSize: 512 })
    const value = (flag: string) => args[args.indexOf(flag) + 1]
    assert.strictEqual(value("--host"), "127.0.0.1")
    assert.strictEqual(value("--port"), "1234")
    assert.strictEqual(value("--threads"), "2")
    assert.strictEqual(value("--threads-batch"), "2")
    assert.strictEqual(value("--ctx-size"), "8192")
    assert.strictEqual(value("--batch-size"), "512")
    assert.strictEqual(value("--temp"), "0")
    assert.notInclude(args, "--parallel")
    assert.include(LlamaServer.serverArguments({ model: "/m.gguf", port: 1, threads: 1, contextSize: 1, batchSize: 1, parallel: 4 }), "--parallel")
  })
})
