/**
 * The CUDA inventory's readings of nvidia-smi: one device per GPU line (names with commas too),
 * CUDA_VISIBLE_DEVICES by index, and a process's own VRAM (summed over GPUs; absent is not zero).
 * Sample outputs in the csv,noheader,nounits format the inventory asks nvidia-smi for.
 */
import { assert, describe, it } from "@effect/vitest"
import { parseDriverVersion, parseGpus, parseProcessMemory, visible } from "../../src/native/engine/NvidiaSmi.js"

const MiB = 1024 * 1024

describe("nvidia-smi readings", () => {
  it("one device per GPU with its total and free memory", () => {
    const gpus = parseGpus("0, NVIDIA H200, 143771, 143248\n1, NVIDIA H200, 143771, 100000\n\n")
    assert.deepStrictEqual(gpus, [
      { index: 0, name: "NVIDIA H200", totalBytes: 143771 * MiB, freeBytes: 143248 * MiB },
      { index: 1, name: "NVIDIA H200", totalBytes: 143771 * MiB, freeBytes: 100000 * MiB }
    ])
    assert.strictEqual(parseGpus("0, Tesla, Rev. B, 16000, 15000")[0]?.name, "Tesla, Rev. B")
    assert.deepStrictEqual(parseGpus("No devices were found"), [])
  })

  it("CUDA_VISIBLE_DEVICES keeps the listed indices in its order; unset or UUIDs keep all", () => {
    const gpus = parseGpus("0, A, 10, 5\n1, B, 20, 10\n2, C, 30, 15")
    assert.deepStrictEqual(visible(gpus, "2,0").map((g) => g.name), ["C", "A"])
    assert.strictEqual(visible(gpus, undefined).length, 3)
    assert.strictEqual(visible(gpus, "GPU-8f2c").length, 3)
  })

  it("a process's own VRAM is what the driver lists for its pid, summed; another process's is not charged", () => {
    const apps = "4242, 1536\n777, 80000\n4242, 512\n"
    assert.strictEqual(parseProcessMemory(apps, 4242), 2048 * MiB)
    assert.strictEqual(parseProcessMemory(apps, 777), 80000 * MiB)
    assert.isUndefined(parseProcessMemory(apps, 1))
    assert.isUndefined(parseProcessMemory("", 4242))
  })

  it("the driver's version is read from the kernel module's line; another text has none", () => {
    const proc = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16-I3-B12-4-3)  Thu Oct 30 2026\nGCC version:  gcc version 12.2.0\n"
    assert.strictEqual(parseDriverVersion(proc), "580.159.04")
    assert.strictEqual(parseDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024"), "550.54.14")
    assert.isUndefined(parseDriverVersion("GCC version: 12.2.0"))
  })
})
