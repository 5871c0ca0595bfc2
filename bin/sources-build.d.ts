// Types of bin/sources-build.js (plain JavaScript: it runs before anything can compile TypeScript).
export declare const projectRoot: string
export declare const buildsDir: string
/** The sources under src/ as they are now (absolute path -> bytes) and the build key they give. */
export declare const snapshot: () => { readonly sources: ReadonlyMap<string, Buffer>; readonly key: string }
/** The directory of the build of the sources as they are now (`main.js` and `child.js` in it), built first when there is none. */
export declare const currentBuild: () => Promise<string>
