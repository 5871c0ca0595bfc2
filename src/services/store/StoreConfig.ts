/**
 * The store's configuration: its root, the keys trusted to sign manifests, the manifest size
 * limit, the default device, the reaping grace and the seed. A Tag with its `defaults`, a `layer`
 * from options over the defaults, and `config` / `layerConfig` / `layerFromEnv` reading
 * `effect/Config` (`NATIVEGEN_STORE_*` from the environment).
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Os from "node:os"
import * as Path from "node:path"
import { configLayers, fromEnv, setting } from "../../internal/ConfigLayers.js"
import * as Seed from "./Seed.js"

/** Store configuration. */
export interface StoreConfigShape {
  /** The store root directory (created 0700 if absent). Default `$XDG_DATA_HOME/nativegen/store` (or `~/.local/share/...`). */
  readonly root: string
  /** PEM (SPKI) ed25519 public keys trusted to sign manifests. Default: none besides the seed key. */
  readonly trustedKeys: ReadonlyArray<string>
  /** Whether the seed's own public key (`<seed dir>/seed.pub`) is trusted. Default true. */
  readonly trustSeedKey: boolean
  /** Largest signed manifest accepted, checked before parsing. Default 65536 bytes. */
  readonly maxManifestBytes: number
  /** Device used when an operation names none. Default `cpu`. */
  readonly device: string
  /** Unreferenced, unleased blobs younger than this are not reaped. Default 10 minutes. */
  readonly reapGrace: Duration.Duration
  /** The seed that `importSeed` imports. Default: the packaged seed. */
  readonly seed: Seed.SeedSource
}

/** `$XDG_DATA_HOME/nativegen/store`, or `~/.local/share/nativegen/store`. */
const defaultRoot = (): string =>
  Path.join(process.env.XDG_DATA_HOME ?? Path.join(Os.homedir(), ".local", "share"), "nativegen", "store")

/** The defaults (computed: the root depends on the environment). */
const defaults = (): StoreConfigShape => ({
  root: defaultRoot(),
  trustedKeys: [],
  trustSeedKey: true,
  maxManifestBytes: 65536,
  device: "cpu",
  reapGrace: Duration.minutes(10),
  seed: Seed.packaged
})

/** Reads `root`, `trustedKeys` (PEM texts), `maxManifestBytes`, `device`, `reapGrace` from the Config provider. */
const config = Config.all({
  root: setting("string", "root", defaultRoot(), "Store root directory"),
  trustedKeys: Config.array(Config.string(), "trustedKeys").pipe(
    Config.withDefault([]),
    Config.withDescription("PEM ed25519 public keys trusted to sign manifests")
  ),
  maxManifestBytes: setting("integer", "maxManifestBytes", 65536, "Largest signed manifest accepted, checked before parsing"),
  device: setting("string", "device", "cpu", "Default device name"),
  reapGrace: setting("duration", "reapGrace", Duration.minutes(10), "Minimum age of an unreferenced blob before reaping")
})

export class StoreConfig extends Context.Tag("nativegen/StoreConfig")<StoreConfig, StoreConfigShape>() {
  /** The defaults (computed: the root depends on the environment). */
  static readonly defaults = defaults

  /** The configurable fields, read from the current Config provider (the seed and its key's trust are options only). */
  static readonly config = config

  private static readonly layers = configLayers(StoreConfig, { defaults, config, env: fromEnv("NATIVEGEN_STORE") })

  /** `options` over the defaults. */
  static readonly layer = StoreConfig.layers.layer

  /** `config` read from the environment (`NATIVEGEN_STORE_*`). */
  static readonly configFromEnv = StoreConfig.layers.configFromEnv

  /** `options` over `config` (the current Config provider) over the defaults. */
  static readonly layerConfig = StoreConfig.layers.layerConfig

  /** `options` over `NATIVEGEN_STORE_ROOT`, `NATIVEGEN_STORE_TRUSTED_KEYS`, ... over the defaults. */
  static readonly layerFromEnv = StoreConfig.layers.layerFromEnv
}
