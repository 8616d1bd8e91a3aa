import type { Plugin } from "rolldown"

/** Names each export of a CommonJS package an ES module re-exports with `export *`. */
export declare const reexportsOfCommonJs: Plugin

/** Optional native bindings left as imports. */
export declare const optionalNative: Array<string>
