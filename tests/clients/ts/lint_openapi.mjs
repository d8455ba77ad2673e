// Lints an OpenAPI document with Redocly's linter (@redocly/openapi-core, the engine of
// `redocly lint`) under its `recommended` ruleset, and prints the problems as one JSON list:
//
//   node lint_openapi.mjs openapi.json
//
// Each problem: {rule, severity ("error" | "warn"), message, where (JSON pointers)}.

import { readFileSync } from "node:fs";
import { resolve } from "node:path";

import { createConfig, lintFromString } from "@redocly/openapi-core";

const path = resolve(process.argv[2]);
const config = await createConfig({ extends: ["recommended"] });
const problems = await lintFromString({
  source: readFileSync(path, "utf8"),
  absoluteRef: path,
  config,
});
process.stdout.write(
  JSON.stringify(
    problems.map((problem) => ({
      rule: problem.ruleId,
      severity: problem.severity,
      message: problem.message,
      where: problem.location.map((place) => place.pointer),
    })),
  ),
);
