/**
 * llama.cpp's names of a GGUF file's `general.file_type` (`llama_ftype`, `LLAMA_FTYPE_MOSTLY_<name>`),
 * the quantization the CLI and Ollama's API show.
 */

/** The names by id, as node-llama-cpp 3.21.1's `GgufFileType` lists them; `null` for ids llama.cpp retired. */
const fileTypeNames: ReadonlyArray<string | null> = [
  "F32", "F16", "Q4_0", "Q4_1", null, null, null, "Q8_0", "Q5_0", "Q5_1",
  "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
  "IQ2_XXS", "IQ2_XS", "Q2_K_S", "IQ3_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ3_M", "IQ2_S", "IQ2_M",
  "IQ4_XS", "IQ1_M", "BF16", null, null, null, "TQ1_0", "TQ2_0", "MXFP4_MOE", "NVFP4", "Q1_0", "Q2_0"
]

/** `Q8_0`, `F16`, `Q4_K_M`, ...: the name of file type `id`; undefined for a retired or unknown id. */
export const fileTypeName = (id: number): string | undefined => fileTypeNames[id] ?? undefined
