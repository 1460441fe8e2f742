// The architecture's layers, bottom to top (docs/architecture.md, "Layers"): a module may import
// from its own layer and the layers below, never from one above; no import cycles at all (type
// imports count). `npm test` runs this check first (npm run check:deps).
const LAYERS = [
  ["base", "^src/(native\\.ts|util/)"],
  ["formats", "^src/(gguf|tokenizer|trace|inspect)/"],
  ["model", "^src/model/"],
  ["sparse", "^src/sparse/"],
  ["plan", "^src/plan/"],
  ["protocol", "^src/protocol/"],
  ["links", "^src/links/"],
  ["actors", "^actors/"],
  ["decode", "^src/decode/"],
  ["api", "^src/api/"],
  ["tools", "^src/(tools|trace-tools)/"],
  ["server", "^src/server/"],
  ["workers", "^workers/"],
  ["cli", "^src/cli/"],
  ["index", "^src/index\\.ts$"],
];

/** One rule per layer: nothing in it imports from a layer above it. */
const upward = LAYERS.slice(0, -1).map(([name, path], i) => ({
  name: `layer-${name}-imports-above`,
  comment: `${name} is below ${LAYERS.slice(i + 1).map(([n]) => n).join(", ")}: it must not import from them`,
  severity: "error",
  from: { path },
  to: { path: LAYERS.slice(i + 1).map(([, p]) => `(${p})`).join("|") },
}));

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      comment: "an import cycle between source files",
      severity: "error",
      from: {},
      to: { circular: true },
    },
    {
      name: "not-in-a-layer",
      comment: "every source file belongs to a layer of the architecture",
      severity: "error",
      from: { path: "^(src|actors|workers)/", pathNot: LAYERS.map(([, p]) => `(${p})`).join("|") },
      to: {},
    },
    ...upward,
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "(^|/)node_modules/|^dist/|\\.d\\.ts$" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"], extensions: [".ts", ".js", ".mjs", ".json"] },
    moduleSystems: ["es6"],
  },

};
