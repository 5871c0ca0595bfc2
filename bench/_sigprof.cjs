// Preloaded with `NODE_OPTIONS=--require .../_sigprof.cjs` (a measurement only; Node 20 refuses
// --cpu-prof in NODE_OPTIONS): SIGUSR2 starts sampling this process's JavaScript, the next SIGUSR2
// stops it and writes $CPU_PROFILE_DIR/<pid>.cpuprofile, so a profile covers exactly the window the
// benchmark measures. Node processes this one spawns (the engine child, whose environment is not
// the host's) get the same preload: spawn is wrapped to pass NODE_OPTIONS and CPU_PROFILE_DIR on.
const inspector = require("node:inspector")
const fs = require("node:fs")
const path = require("node:path")
const childProcess = require("node:child_process")
const { syncBuiltinESMExports } = require("node:module")

const dir = process.env.CPU_PROFILE_DIR
const options = process.env.NODE_OPTIONS
const spawn = childProcess.spawn
childProcess.spawn = function(command, args, spawnOptions) {
  if (spawnOptions !== undefined && spawnOptions.env !== undefined && spawnOptions.env.CPU_PROFILE_DIR === undefined) {
    spawnOptions = { ...spawnOptions, env: { ...spawnOptions.env, NODE_OPTIONS: options, CPU_PROFILE_DIR: dir } }
  }
  return spawn.call(this, command, args, spawnOptions)
}
syncBuiltinESMExports()

const session = new inspector.Session()
session.connect()
session.post("Profiler.enable")
session.post("Profiler.setSamplingInterval", { interval: 200 })
let running = false
process.on("SIGUSR2", () => {
  if (!running) {
    running = true
    session.post("Profiler.start")
    return
  }
  running = false
  session.post("Profiler.stop", (error, result) => {
    if (error !== null) return
    // Written under another name, then renamed: a reader never sees half a profile.
    const file = path.join(dir, `${process.pid}.cpuprofile`)
    fs.writeFileSync(`${file}.partial`, JSON.stringify(result.profile))
    fs.renameSync(`${file}.partial`, file)
  })
})
