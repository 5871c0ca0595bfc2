/**
 * Files of the installed package itself, found from this module's own location and never from the
 * working directory: the package root is the nearest directory above that holds the `package.json`
 * named `nativegen` (the repository when run from the sources, the installed package when run from
 * `dist/`). The seed ships there, and `--version` reads the version from there.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

export const packageName = "nativegen"

interface PackageJson {
  readonly name?: unknown
  readonly version?: unknown
}

const readPackageJson = (dir: string): PackageJson | undefined => {
  try {
    return JSON.parse(Fs.readFileSync(Path.join(dir, "package.json"), "utf8")) as PackageJson
  } catch {
    return undefined
  }
}

/** The root of the nativegen package that holds `from` (a directory or file path). */
export const findPackageRoot = (from: string): string => {
  for (let dir = Path.resolve(from); ; dir = Path.dirname(dir)) {
    if (readPackageJson(dir)?.name === packageName) return dir
    if (Path.dirname(dir) === dir) throw new Error(`no package.json named ${packageName} above ${from}`)
  }
}

let root: string | undefined

/** The root of this package (computed once). */
export const packageRoot = (): string => (root ??= findPackageRoot(Path.dirname(fileURLToPath(import.meta.url))))

/** This package's version, as its package.json states it. */
export const packageVersion = (): string => {
  const version = readPackageJson(packageRoot())?.version
  if (typeof version !== "string") throw new Error(`the package.json in ${packageRoot()} has no version`)
  return version
}

/** The directory of the seed shipped with the package (`fixtures/seed/`). */
export const seedDir = (): string => Path.join(packageRoot(), "fixtures", "seed")
