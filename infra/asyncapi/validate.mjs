// Validate an AsyncAPI document with the reference parser (@asyncapi/parser).
//
//   node infra/asyncapi/validate.mjs FILE     (or "-" / nothing: stdin)
//
// Prints one line per diagnostic (severity, path, message) and exits 1 when any is an
// error (severity 0), 0 otherwise. Install the parser first: npm ci --ignore-scripts
// in this folder (tests/unit/test_asyncapi_parser.py does).
import { readFileSync } from "node:fs";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";

const file = process.argv[2];
const text = readFileSync(!file || file === "-" ? 0 : file, "utf8");
const parser = new Parser();
const { document, diagnostics } = await parser.parse(text);
const names = ["error", "warning", "information", "hint"];
let errors = 0;
for (const d of diagnostics) {
  if (d.severity === DiagnosticSeverity.Error) errors += 1;
  console.log(`${names[d.severity] ?? d.severity} ${d.code} at /${d.path.join("/")}: ${d.message}`);
}
if (document === undefined && errors === 0) errors = 1;
console.log(`${errors} error(s), ${diagnostics.length - errors} other diagnostic(s)`);
process.exit(errors ? 1 : 0);
